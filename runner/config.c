/*
 * Configuration: one table of options (flag, environment name, default,
 * help text), read by getopt_long: the flag, else the environment, else
 * the default.  The same table prints the usage and a markdown table
 * (--help=markdown: t/config_reference.t holds docs/configuration.md
 * against it); --version prints the version (common/smcp_version.h).
 * Loaded once, before any thread starts; never written again.
 */

#include <getopt.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "runner.h"


/* option types */
#define RUNNER_OPT_STRING    0      /* into a char array of `size` */
#define RUNNER_OPT_INT       1      /* an int, min..max */
#define RUNNER_OPT_COUNT     2      /* an int64_t, min..max */
#define RUNNER_OPT_SIZE      3      /* an int64_t with k, m, g or t */
#define RUNNER_OPT_CPUS      4      /* a decimal number of CPUs */
#define RUNNER_OPT_REDIS     5      /* host:port or unix:/path */
#define RUNNER_OPT_SECRET    6      /* a file; else env_value's value */
#define RUNNER_OPT_AUTHOR    7      /* "Name <email>" */
#define RUNNER_OPT_KEYS      8      /* a keys file (common/smcp_keyring.h) */

/* option flags */
#define RUNNER_OPT_REQUIRED  0x01
#define RUNNER_OPT_HOSTNAME  0x02   /* default: the host name */
#define RUNNER_OPT_SIGNING   0x04   /* the bare signing secret: none with
                                       --keys-file */

#define RUNNER_OPT_WRAP      72     /* help text column */

#define RUNNER_TEST_ENV      "SMCP_RUNNER_TEST_"    /* test hooks' prefix */

/* what to print instead of running: --help, --help=markdown, --version */
#define RUNNER_SHOW_HELP     1
#define RUNNER_SHOW_MARKDOWN 2
#define RUNNER_SHOW_VERSION  3


typedef struct {
    const char  *flag;              /* without its dashes */
    const char  *arg;               /* what it takes, for the usage */
    const char  *env;
    const char  *def;               /* NULL: none */
    const char  *help;
    int          type;
    unsigned     flags;
    size_t       offset;            /* of its field in runner_config_t */
    size_t       size;              /* RUNNER_OPT_STRING: the field's size */
    int64_t      min;               /* numbers; RUNNER_OPT_SECRET: bytes */
    int64_t      max;
    const char  *env_value;         /* RUNNER_OPT_SECRET: the value itself */
} runner_option_t;


#define RUNNER_F(field)      offsetof(runner_config_t, field)
#define RUNNER_S(field)      RUNNER_F(field), sizeof(((runner_config_t *) 0)->field)
#define RUNNER_KB            1024LL
#define RUNNER_MB            (1024 * RUNNER_KB)
#define RUNNER_GB            (1024 * RUNNER_MB)


static const runner_option_t  runner_options[] = {

    { "redis", "ADDR", "SMCP_REDIS", SMCP_DEFAULT_REDIS,
      "Redis: host:port, unix:/path, or sentinel://HOST:PORT,.../MASTER "
      "(the master Redis Sentinel names, followed through a failover)",
      RUNNER_OPT_REDIS, 0, 0, 0, 0, 0, NULL },

    { "redis-password-file", "PATH", "SMCP_REDIS_PASSWORD_FILE", NULL,
      "Redis requires a password (AUTH after every connect; never logged)",
      RUNNER_OPT_SECRET, 0, RUNNER_F(redis_password), 0, 1, 0,
      "SMCP_REDIS_PASSWORD" },

    { "prefix", "STR", "SMCP_REDIS_PREFIX", SMCP_DEFAULT_PREFIX,
      "key prefix",
      RUNNER_OPT_STRING, 0, RUNNER_S(prefix), 0, 0, NULL },

    { "name", "STR", "SMCP_RUNNER_NAME", NULL,
      "consumer name: keep it stable per host, restarts re-attach by it",
      RUNNER_OPT_STRING, RUNNER_OPT_HOSTNAME, RUNNER_S(name), 0, 0, NULL },

    { "keys-file", "PATH", "SMCP_KEYS_FILE", NULL,
      "the token signing keys, \"KID SECRET [legacy]\" a line: the first "
      "signs the run tokens (read at start: restart the runner after a "
      "rotation); takes the place of --secret-file",
      RUNNER_OPT_KEYS, 0, RUNNER_F(keys), 0, 0, 0, NULL },

    { "secret-file", "PATH", "SMCP_SECRET_FILE", NULL,
      "the token signing secret, when there is no --keys-file (one of the "
      "two is required)",
      RUNNER_OPT_SECRET, RUNNER_OPT_SIGNING, RUNNER_F(secret), 0,
      SMCP_SECRET_MIN, 0, "PROXY_JWT_SECRET" },

    { "docker-socket", "PATH", "SMCP_DOCKER_SOCKET", "/var/run/docker.sock",
      "the Docker engine's socket",
      RUNNER_OPT_STRING, 0, RUNNER_S(docker_socket), 0, 0, NULL },

    { "image", "NAME", "SMCP_SANDBOX_IMAGE", "smcp-sandbox:1.18.33",
      "the sandbox image (built beforehand)",
      RUNNER_OPT_STRING, 0, RUNNER_S(image), 0, 0, NULL },

    { "allowed-images", "LIST", "SMCP_ALLOWED_IMAGES", NULL,
      "images a run may choose (opencode_run_task's image), comma-separated;"
      " each must follow the sandbox contract",
      RUNNER_OPT_STRING, 0, RUNNER_S(allowed_images), 0, 0, NULL },

    { "agent-images", "LIST", "SMCP_AGENT_IMAGES", NULL,
      "the agents besides OpenCode this runner runs (opencode_run_task's "
      "agent), each in its image: AGENT=IMAGE, comma-separated (e.g. "
      "claude-code=smcp-sandbox-claude-code:2.1.328; runner/sandbox/"
      "build-agent-image makes them)",
      RUNNER_OPT_STRING, 0, RUNNER_S(agent_images), 0, 0, NULL },

    { "network", "NAME", "SMCP_SANDBOX_NET", "smcp-sandbox",
      "the sandbox network",
      RUNNER_OPT_STRING, 0, RUNNER_S(network), 0, 0, NULL },

    { "egress-url", "URL", "SMCP_EGRESS_URL", NULL,
      "the egress listener as sandboxes see it, e.g. http://172.29.0.1:8090",
      RUNNER_OPT_STRING, RUNNER_OPT_REQUIRED, RUNNER_S(egress_url), 0, 0,
      NULL },

    { "dns", "IP", "SMCP_SANDBOX_DNS", NULL,
      "the sandboxes' DNS server: the sandbox network's gateway",
      RUNNER_OPT_STRING, 0, RUNNER_S(dns), 0, 0, NULL },

    { "git-host", "HOST", "SMCP_GIT_HOST", SMCP_DEFAULT_GIT_HOST,
      "the git host the egress proxy stands in for",
      RUNNER_OPT_STRING, 0, RUNNER_S(git_host), 0, 0, NULL },

    { "git-author", "\"NAME <EMAIL>\"", "SMCP_GIT_AUTHOR",
      "sandbox-mcp <sandbox-mcp@localhost>",
      "the author of a run's commits (pull requests)",
      RUNNER_OPT_AUTHOR, 0, 0, 0, 0, 0, NULL },

    { "concurrency", "N", "SMCP_CONCURRENCY", "2",
      "runs at once",
      RUNNER_OPT_INT, 0, RUNNER_F(concurrency), 0, 1, 256, NULL },

    { "memory", "SIZE", "SMCP_SANDBOX_MEMORY", "2g",
      "memory of a sandbox",
      RUNNER_OPT_SIZE, 0, RUNNER_F(memory), 0, 6 * RUNNER_MB, INT64_MAX,
      NULL },

    { "cpus", "N", "SMCP_SANDBOX_CPUS", "1",
      "CPUs of a sandbox, a decimal number",
      RUNNER_OPT_CPUS, 0, RUNNER_F(nano_cpus), 0, 0, 0, NULL },

    { "pids", "N", "SMCP_SANDBOX_PIDS", "512",
      "processes of a sandbox",
      RUNNER_OPT_COUNT, 0, RUNNER_F(pids), 0, 1, INT32_MAX, NULL },

    { "pool", "N", "SMCP_POOL", "0",
      "sandboxes of the default image kept created, started and idle for "
      "the runs that start a new session (docker backend); 0: none",
      RUNNER_OPT_INT, 0, RUNNER_F(pool), 0, 0, RUNNER_POOL_MAX, NULL },

    { "pool-images", "LIST", "SMCP_POOL_IMAGES", NULL,
      "warm pools by image: IMAGE=N, comma-separated, each image one of "
      "--allowed-images (or --image, when --pool is 0); with --pool, at "
      "most 64 sandboxes in all",
      RUNNER_OPT_STRING, 0, RUNNER_S(pool_images), 0, 0, NULL },

    { "session-hold", "SECONDS", "SMCP_SESSION_HOLD", "120",
      "once a run of a pooled image ends, a warm sandbox on its session's "
      "workspace is held this long for the session's next run (at most "
      "--concurrency of them, and the tenant's max_running); 0: none",
      RUNNER_OPT_INT, 0, RUNNER_F(session_hold), 0, 0, 86400, NULL },

    { "claim-idle", "MS", "SMCP_CLAIM_IDLE", "60000",
      "take over the runs of a runner silent this long",
      RUNNER_OPT_INT, 0, RUNNER_F(claim_idle_ms), 0, 1000, 86400000, NULL },

    { "egress-container", "NAME", "SMCP_EGRESS_CONTAINER", NULL,
      "nginx runs in a container (compose): each session gets its own "
      "internal network, which NAME joins as \"egress\"",
      RUNNER_OPT_STRING, 0, RUNNER_S(egress_container), 0, 0, NULL },

    { "egress-relay", "HOST:PORT", "SMCP_EGRESS_RELAY_TO", NULL,
      "the egress cannot join the session networks (a swarm service: "
      "docker-stack.yml): the runner keeps the --egress-container itself, "
      "runner/egress-relay from --image on --network, listening on "
      "--egress-url's port and forwarding to HOST:PORT",
      RUNNER_OPT_STRING, 0, RUNNER_S(egress_relay), 0, 0, NULL },

    { "backend", "docker|swarm", "SMCP_BACKEND", "docker",
      "what runs a sandbox: a container (docker) or a one-replica service "
      "of the swarm this engine manages (swarm)",
      RUNNER_OPT_STRING, 0, RUNNER_S(backend), 0, 0, NULL },

    { "swarm-constraints", "LIST", "SMCP_SWARM_CONSTRAINTS", NULL,
      "swarm: placement constraints of every run beside its node's, ';' "
      "between them, e.g. node.labels.smcp-sandbox==1",
      RUNNER_OPT_STRING, 0, RUNNER_S(constraints), 0, 0, NULL },

    { "max-line", "SIZE", "SMCP_MAX_LINE", "256k",
      "longer log lines are cut, with a warning event",
      RUNNER_OPT_SIZE, 0, RUNNER_F(max_line), 0, RUNNER_KB, 64 * RUNNER_MB,
      NULL },

    { "diff-max", "SIZE", "SMCP_DIFF_MAX", "10m",
      "bytes kept of a run's diff",
      RUNNER_OPT_SIZE, 0, RUNNER_F(diff_max), 0, RUNNER_KB, 256 * RUNNER_MB,
      NULL },

    { "max-event-bytes", "SIZE", "SMCP_MAX_EVENT_BYTES", "64m",
      "a run's stored events; later output is not stored",
      RUNNER_OPT_SIZE, 0, RUNNER_F(max_event_bytes), 0, RUNNER_KB,
      INT64_MAX, NULL },

    { "max-result", "SIZE", "SMCP_MAX_RESULT", "256k",
      "bytes kept of a run's result",
      RUNNER_OPT_SIZE, 0, RUNNER_F(max_result), 0, RUNNER_KB, 64 * RUNNER_MB,
      NULL },

    { "workspace-limit", "SIZE", "SMCP_WORKSPACE_LIMIT", "10g",
      "bytes of a session's volume: a run past it is stopped",
      RUNNER_OPT_SIZE, 0, RUNNER_F(workspace_limit), 0, 1, INT64_MAX, NULL },

    { "workspace-inodes", "N", "SMCP_WORKSPACE_INODES", "1000000",
      "files in a session's volume: a run past it is stopped",
      RUNNER_OPT_SIZE, 0, RUNNER_F(workspace_inodes), 0, 1, INT64_MAX,
      NULL },

    { "janitor-interval", "S", "SMCP_JANITOR_INTERVAL", "60",
      "idle sessions are expired this often",
      RUNNER_OPT_INT, 0, RUNNER_F(janitor_interval), 0, 1, 86400, NULL },

    { "tenant-redis-bytes", "SIZE", "SMCP_TENANT_REDIS_BYTES", "128m",
      "a tenant's budget of Redis (nginx's sandbox_mcp_tenant_redis_bytes: "
      "set both alike): once its runs hold it, a run stores no more events "
      "and no diff; 0: none",
      RUNNER_OPT_SIZE, 0, RUNNER_F(tenant_bytes), 0, 0, INT64_MAX, NULL },

    { "tenant-disk", "SIZE", "SMCP_TENANT_DISK", "20g",
      "a tenant's budget of workspace disk (nginx's sandbox_mcp_tenant_disk: "
      "set both alike): a run whose tenant's sessions pass it is stopped; "
      "0: none",
      RUNNER_OPT_SIZE, 0, RUNNER_F(tenant_disk), 0, 0, INT64_MAX, NULL },

    { "min-free-disk", "SIZE", "SMCP_MIN_FREE_DISK", "5g",
      "the host floor: no sandbox starts while the workspaces' disk "
      "(--disk-path) has less free; queued runs wait, saying why; 0: off",
      RUNNER_OPT_SIZE, 0, RUNNER_F(min_free_disk), 0, 0, INT64_MAX, NULL },

    { "min-free-redis", "SIZE", "SMCP_MIN_FREE_REDIS", "160m",
      "the host floor: no sandbox starts while Redis has less of its "
      "maxmemory free (no maxmemory: not checked); 0: off",
      RUNNER_OPT_SIZE, 0, RUNNER_F(min_free_redis), 0, 0, INT64_MAX, NULL },

    { "disk-path", "PATH", "SMCP_DISK_PATH", NULL,
      "whose free disk --min-free-disk reads; default the engine's volumes "
      "directory (DockerRootDir/volumes)",
      RUNNER_OPT_STRING, 0, RUNNER_S(disk_path), 0, 0, NULL },

    { "metrics", "ADDR|off", "SMCP_RUNNER_METRICS", "off",
      "serve Prometheus metrics at http://ADDR/metrics (IP:PORT, "
      "\":PORT\" for every address), or off: none",
      RUNNER_OPT_STRING, 0, RUNNER_S(metrics), 0, 0, NULL },

    { "notify-secret-file", "PATH", "SMCP_NOTIFY_SECRET_FILE", NULL,
      "completion notifications are signed with the file's first line (at "
      "least 16 bytes): X-SMCP-Signature, HMAC-SHA256 of X-SMCP-Timestamp, "
      "\".\" and the body; without it (and without $SMCP_NOTIFY_SECRET, "
      "the secret itself) they go unsigned",
      RUNNER_OPT_SECRET, 0, RUNNER_F(notify_secret), 0, SMCP_SECRET_MIN, 0,
      "SMCP_NOTIFY_SECRET" },

    { "notify-window", "SECONDS", "SMCP_NOTIFY_WINDOW", "3600",
      "a completion notification not delivered is tried again (after 1 s, "
      "doubling up to 300 s) until this long after its first attempt, then "
      "given up",
      RUNNER_OPT_INT, 0, RUNNER_F(notify_window), 0, 1, 2592000, NULL },

    { "log-format", "FORMAT", "SMCP_LOG_FORMAT", "text",
      "text (key=value) or json (one JSON object a line)",
      RUNNER_OPT_STRING, 0, RUNNER_S(log_format), 0, 0, NULL },
};

#define RUNNER_NOPTIONS  (sizeof(runner_options) / sizeof(runner_options[0]))


/* help text wrapped at RUNNER_OPT_WRAP, each line indented */
static void
runner_config_wrap(FILE *f, const char *text, const char *indent)
{
    size_t       col, w;
    const char  *p, *sp;

    fputs(indent, f);
    col = strlen(indent);

    for (p = text; *p; p = sp) {
        while (*p == ' ') {
            p++;
        }

        sp = strchr(p, ' ');
        if (sp == NULL) {
            sp = p + strlen(p);
        }

        w = sp - p;

        if (col > strlen(indent) && col + 1 + w > RUNNER_OPT_WRAP) {
            fprintf(f, "\n%s", indent);
            col = strlen(indent);

        } else if (col > strlen(indent)) {
            fputc(' ', f);
            col++;
        }

        fwrite(p, 1, w, f);
        col += w;
    }

    fputc('\n', f);
}


/* where an option's value comes from, as text */
static void
runner_config_source(const runner_option_t *o, char *buf, size_t size,
    int md)
{
    const char  *q = md ? "`" : "$";
    const char  *e = md ? "`" : "";

    snprintf(buf, size, "%s%s%s%s%s%s%s", q, o->env, e,
             o->env_value ? ", else " : "", o->env_value ? q : "",
             o->env_value ? o->env_value : "", o->env_value ? e : "");
}


void
runner_config_usage(FILE *f)
{
    size_t                  i;
    char                    text[512], src[128];
    const runner_option_t  *o;

    fprintf(f, "usage: smcp-runner [options]\n"
               "Each option: the flag, else the environment, else the "
               "default.\n"
               "  -h, --help[=markdown]   this text (or a markdown table)\n"
               "      --version           the version (smcp-runner "
               SMCP_VERSION ")\n");

    for (i = 0; i < RUNNER_NOPTIONS; i++) {
        o = &runner_options[i];
        runner_config_source(o, src, sizeof(src), 0);

        snprintf(text, sizeof(text), "%s: %s%s%s%s%s", src, o->help,
                 (o->flags & RUNNER_OPT_REQUIRED) ? " (required)" : "",
                 o->def ? " (" : "", o->def ? o->def : "", o->def ? ")" : "");

        if (o->flags & RUNNER_OPT_HOSTNAME) {
            strcat(text, " (the host name)");
        }

        fprintf(f, "  --%s %s\n", o->flag, o->arg);
        runner_config_wrap(f, text, "        ");
    }
}


/* the options as a markdown table: flag, environment, default, help */
void
runner_config_markdown(FILE *f)
{
    size_t                  i;
    char                    src[128];
    const runner_option_t  *o;

    fprintf(f, "| flag | environment | default | |\n|---|---|---|---|\n");

    for (i = 0; i < RUNNER_NOPTIONS; i++) {
        o = &runner_options[i];
        runner_config_source(o, src, sizeof(src), 1);

        fprintf(f, "| `--%s %s` | %s | %s%s%s | %s |\n", o->flag, o->arg,
                src, o->def ? "`" : "",
                o->def ? o->def
                : (o->flags & RUNNER_OPT_REQUIRED) ? "required"
                : (o->flags & RUNNER_OPT_HOSTNAME) ? "the host name" : "—",
                o->def ? "`" : "", o->help);
    }
}


/* "64m" and the like: > 0, at most INT64_MAX; -1 when it is not one */
static int64_t
runner_config_size(const char *v, int suffix)
{
    char     *end;
    int64_t   n, mult;

    if (*v < '0' || *v > '9') {
        return -1;
    }

    n = strtoll(v, &end, 10);
    mult = 1;

    switch (suffix ? *end : '\0') {
    case 'k': case 'K': mult = RUNNER_KB; end++; break;
    case 'm': case 'M': mult = RUNNER_MB; end++; break;
    case 'g': case 'G': mult = RUNNER_GB; end++; break;
    case 't': case 'T': mult = 1024 * RUNNER_GB; end++; break;
    default: break;
    }

    if (*end != '\0' || n < 0 || n > INT64_MAX / mult) {
        return -1;
    }

    return n * mult;
}


/* n as the shortest size text: "64m", "1k", "1000" */
static void
runner_config_size_text(int64_t n, char *buf, size_t size)
{
    int          i;
    const char  *units = "kmgt";

    for (i = -1; i < 3 && n >= RUNNER_KB && n % RUNNER_KB == 0; i++) {
        n /= RUNNER_KB;
    }

    snprintf(buf, size, "%" PRId64 "%.*s", n, i >= 0 ? 1 : 0,
             i >= 0 ? units + i : "");
}


/* host:port, unix:/path or sentinel://HOST:PORT,.../MASTER */
static int
runner_config_redis(runner_config_t *cfg, const char *v, char *err,
    size_t errlen)
{
    char  why[200];

    if (smcp_redis_addr_parse(v, strlen(v), &cfg->redis, why, sizeof(why))
        != SMCP_OK)
    {
        snprintf(err, errlen, "--redis: %s", why);
        return RUNNER_ERR;
    }

    return RUNNER_OK;
}


/* a secret: the file v names, else the environment's value, if any */
static int
runner_config_secret(const runner_option_t *o, runner_secret_t *s,
    const char *v, char *err, size_t errlen)
{
    const char  *ev;

    if (v) {
        return smcp_secret_from_file(v, o->min, s->data, &s->len, err,
                                     errlen) == SMCP_OK ? RUNNER_OK
                                                        : RUNNER_ERR;
    }

    ev = o->env_value ? getenv(o->env_value) : NULL;

    if ((ev == NULL || *ev == '\0') && !(o->flags & RUNNER_OPT_REQUIRED)) {
        return RUNNER_OK;
    }

    if (smcp_secret_from_env(o->env_value, o->min, s->data, &s->len, err,
                             errlen) != SMCP_OK)
    {
        if (ev == NULL || *ev == '\0') {
            snprintf(err, errlen, "--%s (or $%s, or $%s) is required: %s",
                     o->flag, o->env, o->env_value, o->help);
        }

        return RUNNER_ERR;
    }

    return RUNNER_OK;
}


/* a number option's value, in range; what: where it came from */
static int
runner_config_number(runner_config_t *cfg, const runner_option_t *o,
    const char *v, const char *what, char *err, size_t errlen)
{
    char     *end, lo[32], hi[32];
    double    cpus;
    int64_t   n;
    char     *field = (char *) cfg + o->offset;

    if (o->type == RUNNER_OPT_CPUS) {
        cpus = strtod(v, &end);

        if (*v == '\0' || *end != '\0' || !(cpus >= 0.01 && cpus <= 1024)) {
            snprintf(err, errlen, "%s \"%s\": not a number of CPUs from "
                     "0.01 to 1024", what, v);
            return RUNNER_ERR;
        }

        *(int64_t *) field = (int64_t) (cpus * 1e9);
        return RUNNER_OK;
    }

    n = runner_config_size(v, o->type == RUNNER_OPT_SIZE);

    if (n < o->min || n > o->max) {
        if (o->type == RUNNER_OPT_SIZE) {
            runner_config_size_text(o->min, lo, sizeof(lo));
            runner_config_size_text(o->max, hi, sizeof(hi));

        } else {
            snprintf(lo, sizeof(lo), "%" PRId64, o->min);
            snprintf(hi, sizeof(hi), "%" PRId64, o->max);
        }

        snprintf(err, errlen, "%s \"%s\": not a %s %s %s%s%s", what, v,
                 o->type == RUNNER_OPT_SIZE ? "size (k, m, g, t: KiB...)"
                                            : "number",
                 o->max == INT64_MAX ? "of at least" : "from", lo,
                 o->max == INT64_MAX ? "" : " to ",
                 o->max == INT64_MAX ? "" : hi);
        return RUNNER_ERR;
    }

    if (o->type == RUNNER_OPT_INT) {
        *(int *) field = (int) n;

    } else {
        *(int64_t *) field = n;
    }

    return RUNNER_OK;
}


/* "Name <email>": printable, the name without '<' or '>', the email
 * without spaces or angle brackets */
static int
runner_config_author(runner_config_t *cfg, const char *v, const char *what,
    char *err, size_t errlen)
{
    size_t       n, e;
    const char  *lt, *p;

    lt = strchr(v, '<');
    n = lt ? (size_t) (lt - v) : 0;

    while (n > 0 && v[n - 1] == ' ') {
        n--;
    }

    e = lt ? strcspn(lt + 1, "<> \t") : 0;

    for (p = v; *p; p++) {
        if ((unsigned char) *p < 0x20 || *p == 0x7f) {
            lt = NULL;
        }
    }

    if (lt == NULL || n == 0 || e == 0 || lt[1 + e] != '>' || lt[2 + e]
        || memchr(v, '>', n) || n >= sizeof(cfg->git_author_name)
        || e >= sizeof(cfg->git_author_email))
    {
        snprintf(err, errlen, "%s: want \"Name <email>\" (printable, at most "
                 "%zu bytes each)", what, sizeof(cfg->git_author_name) - 1);
        return RUNNER_ERR;
    }

    memcpy(cfg->git_author_name, v, n);
    cfg->git_author_name[n] = '\0';
    memcpy(cfg->git_author_email, lt + 1, e);
    cfg->git_author_email[e] = '\0';

    return RUNNER_OK;
}


/* one option's value (flag, else environment, else default) into cfg */
static int
runner_config_set(runner_config_t *cfg, const runner_option_t *o,
    const char *v, const char *what, char *err, size_t errlen)
{
    char  host[128];

    if (v == NULL && o->type != RUNNER_OPT_SECRET
        && o->type != RUNNER_OPT_KEYS)
    {
        if (o->flags & RUNNER_OPT_REQUIRED) {
            snprintf(err, errlen, "--%s (or $%s) is required: %s", o->flag,
                     o->env, o->help);
            return RUNNER_ERR;
        }

        if (!(o->flags & RUNNER_OPT_HOSTNAME)) {
            return RUNNER_OK;
        }

        if (gethostname(host, sizeof(host)) != 0) {
            strcpy(host, "runner");
        }

        host[sizeof(host) - 1] = '\0';
        v = host;
    }

    switch (o->type) {

    case RUNNER_OPT_STRING:
        if (strlen(v) >= o->size) {
            snprintf(err, errlen, "%s is too long (at most %zu bytes)",
                     what, o->size - 1);
            return RUNNER_ERR;
        }

        strcpy((char *) cfg + o->offset, v);
        return RUNNER_OK;

    case RUNNER_OPT_REDIS:
        return runner_config_redis(cfg, v, err, errlen);

    case RUNNER_OPT_AUTHOR:
        return runner_config_author(cfg, v, what, err, errlen);

    case RUNNER_OPT_KEYS:
        if (v == NULL) {
            return RUNNER_OK;
        }

        return smcp_keyring_load(&cfg->keys, v, err, errlen) == SMCP_OK
               ? RUNNER_OK : RUNNER_ERR;

    case RUNNER_OPT_SECRET:
        if ((o->flags & RUNNER_OPT_SIGNING) && cfg->keys.n) {
            if (v) {
                snprintf(err, errlen, "--keys-file and --%s (or $%s): set "
                         "one of them", o->flag, o->env);
                return RUNNER_ERR;
            }

            return RUNNER_OK;
        }

        return runner_config_secret(o, (runner_secret_t *) ((char *) cfg
                                                            + o->offset),
                                    v, err, errlen);

    default:
        return runner_config_number(cfg, o, v, what, err, errlen);
    }
}


/* the flags given: vals[i] for runner_options[i]; RUNNER_AGAIN: *show
 * says what to print instead (--help, --version) */
static int
runner_config_flags(int argc, char **argv, const char **vals, int *show,
    char *err, size_t errlen)
{
    int            i, c, idx;
    struct option  longopts[RUNNER_NOPTIONS + 3];

    for (i = 0; i < (int) RUNNER_NOPTIONS; i++) {
        longopts[i].name = runner_options[i].flag;
        longopts[i].has_arg = required_argument;
        longopts[i].flag = NULL;
        longopts[i].val = 0;
    }

    longopts[i] = (struct option) { "help", optional_argument, NULL, 'h' };
    longopts[i + 1] = (struct option) { "version", no_argument, NULL, 'V' };
    longopts[i + 2] = (struct option) { NULL, 0, NULL, 0 };

    optind = 0;                     /* glibc: start over */
    opterr = 0;

    while ((c = getopt_long(argc, argv, ":h", longopts, &idx)) != -1) {
        switch (c) {

        case 0:
            vals[idx] = optarg;
            break;

        case 'h':
            *show = (optarg && strcmp(optarg, "markdown") == 0)
                    ? RUNNER_SHOW_MARKDOWN : RUNNER_SHOW_HELP;
            return RUNNER_AGAIN;

        case 'V':
            *show = RUNNER_SHOW_VERSION;
            return RUNNER_AGAIN;

        case ':':
            snprintf(err, errlen, "option \"%s\" needs a value",
                     argv[optind - 1]);
            return RUNNER_ERR;

        default:
            snprintf(err, errlen, "unknown option \"%s\"", argv[optind - 1]);
            return RUNNER_ERR;
        }
    }

    if (optind < argc) {
        snprintf(err, errlen, "unexpected argument \"%s\"", argv[optind]);
        return RUNNER_ERR;
    }

    return RUNNER_OK;
}


/* the next name of the comma list *p into buf (spaces trimmed, longer
 * ones skipped); 0 at its end */
int
runner_config_list_next(const char **p, char *buf, size_t size)
{
    size_t       n;
    const char  *s;

    for ( ;; ) {
        s = *p + strspn(*p, " ,");

        if (*s == '\0') {
            return 0;
        }

        n = strcspn(s, ", ");
        *p = s + n;

        if (n < size) {
            memcpy(buf, s, n);
            buf[n] = '\0';
            return 1;
        }
    }
}


/* 1: a run may choose image (--image, one of --allowed-images) */
int
runner_config_offers(const runner_config_t *cfg, const char *image)
{
    const char  *p;
    char         name[sizeof(cfg->image)];

    if (strcmp(image, cfg->image) == 0) {
        return 1;
    }

    p = cfg->allowed_images;

    while (runner_config_list_next(&p, name, sizeof(name))) {
        if (strcmp(name, image) == 0) {
            return 1;
        }
    }

    return 0;
}


/*
 * The warm pools into cfg->pools: --pool's (the default image), then each
 * IMAGE=N of --pool-images (an image a run may choose, named once, N from
 * 0 to RUNNER_POOL_MAX); all of them RUNNER_POOL_MAX sandboxes at most.
 */
static int
runner_config_pools(runner_config_t *cfg, char *err, size_t errlen)
{
    int                  i;
    int64_t              n;
    char                *eq, entry[sizeof(cfg->pool_images)];
    const char          *p;
    runner_pool_size_t  *ps;

    cfg->npools = 0;
    cfg->pool_total = 0;

    if (cfg->pool > 0) {
        ps = &cfg->pools[cfg->npools++];
        strcpy(ps->image, cfg->image);
        ps->n = cfg->pool;
        cfg->pool_total = cfg->pool;
    }

    p = cfg->pool_images;

    while (runner_config_list_next(&p, entry, sizeof(entry))) {
        eq = strrchr(entry, '=');

        if (eq == NULL || eq == entry) {
            snprintf(err, errlen, "--pool-images: \"%.200s\": want IMAGE=N",
                     entry);
            return RUNNER_ERR;
        }

        *eq = '\0';
        n = runner_config_size(eq + 1, 0);

        if (n < 0 || n > RUNNER_POOL_MAX) {
            snprintf(err, errlen, "--pool-images: %.200s=\"%.32s\": not a "
                     "number from 0 to %d", entry, eq + 1, RUNNER_POOL_MAX);
            return RUNNER_ERR;
        }

        if (strlen(entry) >= sizeof(ps->image)
            || !runner_config_offers(cfg, entry))
        {
            snprintf(err, errlen, "--pool-images: %.200s is not an image a "
                     "run may choose (--image, --allowed-images)", entry);
            return RUNNER_ERR;
        }

        for (i = 0; i < cfg->npools; i++) {
            if (strcmp(cfg->pools[i].image, entry) == 0) {
                snprintf(err, errlen, "--pool-images: %.200s is named twice%s",
                         entry, (i == 0 && cfg->pool > 0)
                                ? " (--pool is the default image's)" : "");
                return RUNNER_ERR;
            }
        }

        if (cfg->npools == RUNNER_POOL_IMAGES) {
            snprintf(err, errlen, "--pool-images: more than %d images",
                     RUNNER_POOL_IMAGES);
            return RUNNER_ERR;
        }

        ps = &cfg->pools[cfg->npools++];
        strcpy(ps->image, entry);
        ps->n = (int) n;
        cfg->pool_total += (int) n;
    }

    if (cfg->pool_total > RUNNER_POOL_MAX) {
        snprintf(err, errlen, "--pool and --pool-images: %d sandboxes in "
                 "all, at most %d", cfg->pool_total, RUNNER_POOL_MAX);
        return RUNNER_ERR;
    }

    return RUNNER_OK;
}


/* the notifications' secret: the first line of its file */
static int
runner_config_notify(runner_config_t *cfg, char *err, size_t errlen)
{
    runner_secret_t  *s = &cfg->notify_secret;
    size_t            n;

    if (s->len == 0) {
        return RUNNER_OK;
    }

    n = 0;

    while (n < s->len && s->data[n] != '\n' && s->data[n] != '\r') {
        n++;
    }

    if (n < SMCP_SECRET_MIN) {
        OPENSSL_cleanse(s, sizeof(*s));
        snprintf(err, errlen, "--notify-secret-file: its first line is "
                 "shorter than %d bytes", SMCP_SECRET_MIN);
        return RUNNER_ERR;
    }

    OPENSSL_cleanse(s->data + n, sizeof(s->data) - n);
    s->len = n;

    return RUNNER_OK;
}


/* the signing keys: --keys-file's, else a ring of the bare secret */
static int
runner_config_signing(runner_config_t *cfg, char *err, size_t errlen)
{
    int  rc;

    if (cfg->keys.n) {
        return RUNNER_OK;
    }

    if (cfg->secret.len == 0) {
        snprintf(err, errlen, "--keys-file or --secret-file (or "
                 "$SMCP_KEYS_FILE, $SMCP_SECRET_FILE or $PROXY_JWT_SECRET) "
                 "is required: the token signing keys");
        return RUNNER_ERR;
    }

    rc = smcp_keyring_single(&cfg->keys, cfg->secret.data, cfg->secret.len);

    OPENSSL_cleanse(&cfg->secret, sizeof(cfg->secret));

    return rc == SMCP_OK ? RUNNER_OK : RUNNER_ERR;
}


/*
 * SMCP_RUNNER_TEST_* variables are the test build's hooks (test_hooks.c):
 * a release build refuses to start with one set, rather than run as if it
 * were not.  RUNNER_ERR: err names it.
 */
int
runner_config_test_hooks(char *err, size_t errlen)
{
#ifndef RUNNER_TEST_HOOKS
    size_t   n;
    char   **e;

    for (e = environ; *e; e++) {
        if (strncmp(*e, RUNNER_TEST_ENV, sizeof(RUNNER_TEST_ENV) - 1) != 0) {
            continue;
        }

        n = strcspn(*e, "=");

        snprintf(err, errlen, "%.*s is set: SMCP_RUNNER_TEST_* variables are "
                 "test hooks, which only the test build (make runner-test) "
                 "has; this runner is a release build and will not start "
                 "with one: unset it", (int) (n < 64 ? n : 64), *e);
        return RUNNER_ERR;
    }
#endif

    return RUNNER_OK;
}


/*
 * RUNNER_OK (cfg filled), RUNNER_ERR (err says why), RUNNER_AGAIN (--help
 * or --version: printed on stdout).
 */
int
runner_config_load(runner_config_t *cfg, int argc, char **argv, char *err,
    size_t errlen)
{
    int                     rc, show;
    size_t                  i;
    char                    rnd[17];
    char                    what[64];
    const char             *vals[RUNNER_NOPTIONS], *v;
    const runner_option_t  *o;

    memset(cfg, 0, sizeof(*cfg));
    memset(vals, 0, sizeof(vals));
    show = 0;

    rc = runner_config_flags(argc, argv, vals, &show, err, errlen);

    if (rc == RUNNER_AGAIN) {
        switch (show) {

        case RUNNER_SHOW_MARKDOWN:
            runner_config_markdown(stdout);
            break;

        case RUNNER_SHOW_VERSION:
            printf("smcp-runner " SMCP_VERSION "\n");
            break;

        default:
            runner_config_usage(stdout);
        }

        return RUNNER_AGAIN;
    }

    if (rc != RUNNER_OK) {
        return RUNNER_ERR;
    }

    for (i = 0; i < RUNNER_NOPTIONS; i++) {
        o = &runner_options[i];
        v = vals[i];
        snprintf(what, sizeof(what), "--%s", o->flag);

        if (v == NULL) {
            v = getenv(o->env);
            snprintf(what, sizeof(what), "$%s", o->env);

            if (v == NULL || *v == '\0') {
                v = o->def;
                snprintf(what, sizeof(what), "--%s's default", o->flag);
            }
        }

        if (runner_config_set(cfg, o, v, what, err, errlen) != RUNNER_OK) {
            return RUNNER_ERR;
        }
    }

    if (runner_config_pools(cfg, err, errlen) != RUNNER_OK
        || runner_config_signing(cfg, err, errlen) != RUNNER_OK
        || runner_config_notify(cfg, err, errlen) != RUNNER_OK)
    {
        return RUNNER_ERR;
    }

    /* this process, in claims: a restart is another claimant */
    if (smcp_random_hex(rnd, 8) != SMCP_OK) {
        snprintf(err, errlen, "no randomness");
        return RUNNER_ERR;
    }

    snprintf(cfg->instance, sizeof(cfg->instance), "%s/%d/%s", cfg->name,
             (int) getpid(), rnd);

    return RUNNER_OK;
}
