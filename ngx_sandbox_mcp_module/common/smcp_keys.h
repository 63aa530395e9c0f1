/*
 * Redis key layout and run statuses shared by the nginx module and the
 * runner.  Every key is "<prefix><name>"; the prefix is configurable
 * (default "smcp:").  See docs/contracts.md.
 */

#ifndef SMCP_KEYS_H
#define SMCP_KEYS_H

#define SMCP_DEFAULT_PREFIX         "smcp:"

/* key name formats: printf-style, first %s is the prefix */
#define SMCP_KEY_RUN                "%srun:%s"
#define SMCP_KEY_RUN_EVENTS         "%srun:%s:events"
#define SMCP_KEY_RUN_DIFF           "%srun:%s:diff"
#define SMCP_KEY_RUN_INBOX          "%srun:%s:inbox"  /* list: messages
                                        for the run's agent, not yet taken
                                        by its sandbox (run_message.lua) */
#define SMCP_KEY_TENANT_RUNS        "%sruns:%s"
#define SMCP_KEY_SESSION            "%ssession:%s"
#define SMCP_KEY_SESSION_RUNS       "%ssession:%s:runs"
#define SMCP_KEY_QUEUE              "%squeue"
#define SMCP_KEY_MCP_SESSION        "%smcp:%s"
#define SMCP_KEY_MCP_SUBS           "%smcp:%s:subs" /* set: the URIs the
                                                       session subscribed */
#define SMCP_KEY_MCP_LOG            "%smcp:%s:log"  /* string: the level
                                                       logging/setLevel set */
#define SMCP_KEY_MCP_RUNS           "%smcp:%s:runs" /* sorted set: the
                                                       runs the session
                                                       started, by time (its
                                                       GET stream logs their
                                                       lifecycle) */
#define SMCP_KEY_TENANT_ACTIVE      "%stenant:%s:active"  /* set: the
                                                     tenant's started and
                                                     running runs (quotas);
                                                     replaced by the two
                                                     below (issue 8) */
#define SMCP_KEY_TENANT_STARTED     "%stenant:%s:started" /* set: runs not
                                                     yet claimed */
#define SMCP_KEY_TENANT_CLAIMED     "%stenant:%s:claimed" /* set: runs a
                                                     runner holds */
#define SMCP_KEY_SESSION_ACTIVE     "%ssession:%s:active" /* zset: the
                                                     session's unfinished
                                                     runs by created_at */
#define SMCP_KEY_SESSION_FORKS      "%ssession:%s:forks" /* zset: the
                                                     runs of forks of the
                                                     session still to copy
                                                     it, by when their hold
                                                     ends (ms) */
#define SMCP_KEY_SESSIONS           "%ssessions"  /* zset: session ids by
                                                     idle expiry (ms) */
#define SMCP_KEY_TENANT_SESSIONS    "%stenant:%s:sessions" /* zset: the
                                                     tenant's session ids by
                                                     last activity (ms):
                                                     run_create and the
                                                     runner's finish */
#define SMCP_KEY_TENANT_USAGE       "%stenant:%s:usage"   /* hash: what
                                                     the tenant holds, for
                                                     its budgets: bytes,
                                                     sessions, disk, and
                                                     s:<session id> (bytes
                                                     of its workspace) */
#define SMCP_KEY_BUDGET_EXPIRY      "%sbudget:expiry"  /* zset: "<run id>
                                                     <bytes> <tenant>" by
                                                     when the run's keys
                                                     expire (ms) */
#define SMCP_KEY_NOTIFY             "%snotify"    /* zset: runs whose
                                                     completion notification
                                                     is due, by when its
                                                     next attempt is (ms) */
#define SMCP_KEY_STORE_ID           "%sstore-id"  /* string: the runners'
                                                     store identity */
#define SMCP_KEY_RUNNERS            "%srunners"   /* zset: runner name ->
                                                     its last heartbeat
                                                     (ms); expires when no
                                                     runner refreshes it */
#define SMCP_KEY_EGRESS_ROUTES      "%segress:routes" /* string: the routes
                                                     the egress proxy
                                                     serves, space-separated
                                                     (sandbox_mcp_egress_
                                                     announce) */
#define SMCP_KEY_RUNNERS_DRAINING   "%srunners:draining" /* zset: the
                                                     same, of the runners
                                                     draining (SIGUSR1):
                                                     taking no new run */
#define SMCP_KEY_REVOKED            "%srevoked"   /* hash: token jti -> exp
                                                     (unix seconds) */
#define SMCP_KEY_REVOKED_EXP        "%srevoked:exp"   /* zset: the same
                                                     ids by exp, to drop
                                                     the expired */
#define SMCP_KEY_OAUTH_CLIENT       "%soauth:client:%s"   /* hash: a
                                                     registered client */
#define SMCP_KEY_OAUTH_CODE         "%soauth:code:%s"     /* hash, by the
                                                     code's sha256 hex */
#define SMCP_KEY_OAUTH_FAMILY       "%soauth:family:%s"   /* hash: a refresh
                                                     token family */
#define SMCP_KEY_OAUTH_PENDING      "%soauth:pending:%s"  /* string: an
                                                     authorization request
                                                     while the user is at
                                                     GitHub */
#define SMCP_KEY_OAUTH_UNUSED       "%soauth:unused"      /* zset: clients
                                                     no sign-in used yet
                                                     (their keys), by
                                                     expiry: bounded */
#define SMCP_KEY_OAUTH_GITHUB_BOUND "%soauth:github:bound" /* hash: a
                                                     login or organization
                                                     rule -> the GitHub id
                                                     it is bound to */
#define SMCP_KEY_OAUTH_REVOKES      "%soauth:revokes:%s"  /* string: a
                                                     tenant's revocations
                                                     this minute */
#define SMCP_KEY_OAUTH_SIGNINS      "%soauth:signins"     /* zset: GitHub
                                                     sign-ins under way
                                                     (their pending keys),
                                                     by expiry: bounded */

/* pub/sub channels */
#define SMCP_CHAN_RUN               "%srun:%s"    /* workers PSUBSCRIBE
                                                     <prefix>run:* */
#define SMCP_CHAN_TENANT            "%stenant:%s" /* "<runId> <status>"
                                                     on every status change;
                                                     workers PSUBSCRIBE
                                                     <prefix>tenant:* */
#define SMCP_CHAN_CANCEL            "%scancel"
#define SMCP_CHAN_MCP_CANCELLED     "%srun:mcp:%s" /* an MCP session's
                                                     notifications/cancelled:
                                                     the requestId as JSON
                                                     (on the run:* pattern;
                                                     mcp:{sid} is no run) */
#define SMCP_CHAN_REVOKED           "%srevoked"   /* a jti: "<jti> <exp>" */

#define SMCP_QUEUE_GROUP            "runners"

/* run statuses */
#define SMCP_STATUS_STARTED         "started"
#define SMCP_STATUS_RUNNING         "running"
#define SMCP_STATUS_COMPLETED       "completed"
#define SMCP_STATUS_FAILED          "failed"
#define SMCP_STATUS_CANCELLED       "cancelled"

/* id shapes: "run_" / "ses_" followed by 24 lowercase hex digits */
#define SMCP_RUN_ID_PREFIX          "run_"
#define SMCP_SESSION_ID_PREFIX      "ses_"
#define SMCP_ID_HEX_LEN             24
#define SMCP_ID_LEN                 (4 + SMCP_ID_HEX_LEN)

/* event stream cap (XADD MAXLEN ~) */
#define SMCP_EVENTS_MAXLEN          "100000"

/* session states (session hash field `state`; absent: active) */
#define SMCP_SESSION_EXPIRING       "expiring"    /* workspace being removed */
#define SMCP_SESSION_EXPIRED        "expired"

/* token scopes */
#define SMCP_SCOPE_MCP              "mcp"
#define SMCP_SCOPE_UI               "ui"
#define SMCP_SCOPE_EGRESS           "egress"
#define SMCP_SCOPE_NOTIFY           "notify"     /* the runner's call
                                                     to the egress /notify */

#endif /* SMCP_KEYS_H */
