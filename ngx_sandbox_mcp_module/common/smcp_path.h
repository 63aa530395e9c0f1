/*
 * The path of a request to a package registry through the egress proxy,
 * checked as the sandbox sent it: the upstream gets only paths whose
 * every segment is plain, so no server behind the route (Tomcat and Jetty
 * take "..;" for "..", IIS "\" for "/") can read one as leaving the
 * route's prefix.  Plain C, no nginx: fuzzed on its own (fuzz/path.c).
 */

#ifndef SMCP_PATH_H
#define SMCP_PATH_H

#include <stddef.h>


/*
 * NULL when the path (up to "?", the query is not looked at) is plain:
 * it starts with "/", no segment is empty (but the last: a trailing "/"),
 * "." or "..", and every byte is a letter, a digit or one of
 * "-._~!$&'()*+,=:@", or a %XX escape of one of those but "." (no escaped
 * ".", "/", "\", ";", "%", control or non-ASCII byte).  One escaped "/" is
 * let through in an npm scope, "@scope%2Fname" (npm asks for scoped
 * packages so), with both parts non-empty.  Otherwise the reason, for the
 * refusal.
 */
const char *smcp_path_check(const unsigned char *path, size_t len);


#endif /* SMCP_PATH_H */
