/*
 * Defaults the nginx module and the runner share, written once.  Each
 * side's own defaults are in its own place (the module's
 * ngx_http_sandbox_mcp_defaults.h; the runner's option table in
 * runner/config.c).
 */

#ifndef SMCP_DEFAULTS_H
#define SMCP_DEFAULTS_H

#define SMCP_XSTR(x)                SMCP_STR(x)
#define SMCP_STR(x)                 #x

/* where Redis is when nothing says */
#define SMCP_DEFAULT_REDIS_HOST     "127.0.0.1"
#define SMCP_DEFAULT_REDIS_PORT     6379
#define SMCP_DEFAULT_REDIS                                                    \
    SMCP_DEFAULT_REDIS_HOST ":" SMCP_XSTR(SMCP_DEFAULT_REDIS_PORT)

/* the environment variable of the signing secret, when no file is set */
#define SMCP_SECRET_ENV             "PROXY_JWT_SECRET"

/* a run's timeout (s): sandbox_mcp_run_timeout, and the runner's for a
 * run hash without `timeout` */
#define SMCP_DEFAULT_RUN_TIMEOUT    3600

/* how long ended runs' and expired sessions' keys live (s):
 * sandbox_mcp_retention, and the janitor's for a session hash without
 * `retention` */
#define SMCP_DEFAULT_RETENTION      (30 * 86400)

/* the git host the egress proxy stands in for: sandbox_mcp_github_host,
 * the runner's --git-host */
#define SMCP_DEFAULT_GIT_HOST       "github.com"

/* runners' heartbeats (SMCP_KEY_RUNNERS): a runner writes its own this
 * often (ms); /healthz counts a runner alive while its heartbeat is younger
 * than SMCP_RUNNER_STALE_MS; the key expires after SMCP_RUNNER_STALE_MS
 * without any heartbeat */
#define SMCP_RUNNER_HEARTBEAT_MS    5000
#define SMCP_RUNNER_STALE_MS        30000

#endif /* SMCP_DEFAULTS_H */
