/*
 * Defaults the nginx module and the runner share, written once.  Each
 * side's own defaults are in its own header (the module's
 * ngx_http_sandbox_mcp_defaults.h; the runner's configuration table).
 */

#ifndef SMCP_DEFAULTS_H
#define SMCP_DEFAULTS_H

/* Redis, when none is configured */
#define SMCP_DEFAULT_REDIS_HOST     "127.0.0.1"
#define SMCP_DEFAULT_REDIS_PORT     6379
#define SMCP_DEFAULT_REDIS          "127.0.0.1:6379"

/* the environment variable of the signing secret, when no file is set */
#define SMCP_SECRET_ENV             "PROXY_JWT_SECRET"

/* a run's deadline when it has none (s): sandbox_mcp_run_timeout's
 * default, and the runner's for a run hash without `timeout` */
#define SMCP_DEFAULT_RUN_TIMEOUT    3600

/* how long an ended run's keys, and an expired session's, live (s):
 * sandbox_mcp_retention's default, and the runner's for data without a
 * `retention` */
#define SMCP_DEFAULT_RETENTION      (30 * 86400)

#endif /* SMCP_DEFAULTS_H */
