/*
 * The version of sandbox-mcp, written once: the module (serverInfo,
 * /healthz, its line in the error log at start and reload), smcp-runner
 * and smcp-token (--version, the runner's start line) include this file;
 * whatever else shows the version (make help, make up, the docker images
 * through their binaries) takes it from here.  It names the release being
 * made: bumped right after a release, when CHANGELOG.md's "Unreleased"
 * becomes that version's section.
 */

#ifndef SMCP_VERSION_H
#define SMCP_VERSION_H

#define SMCP_VERSION                "0.2.0"

#endif /* SMCP_VERSION_H */
