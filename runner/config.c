/*
 * Configuration: flags first, then the environment, then defaults.
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner.h"


void
runner_config_usage(void)
{
    fprintf(stderr,
"usage: smcp-runner [options]   (flag, else environment, else default)\n"
"  --redis ADDR          $SMCP_REDIS: host:port or unix:/path\n"
"                        (127.0.0.1:6379)\n"
"  --redis-password-file PATH  $SMCP_REDIS_PASSWORD_FILE: Redis requires\n"
"                        a password (AUTH after every connect); else\n"
"                        $SMCP_REDIS_PASSWORD\n"
"  --prefix STR          $SMCP_REDIS_PREFIX: key prefix (smcp:)\n"
"  --name STR            $SMCP_RUNNER_NAME: consumer name, keep it stable\n"
"                        per host: restarts re-attach by it (hostname)\n"
"  --secret-file PATH    $SMCP_SECRET_FILE: the token signing secret\n"
"                        (else $PROXY_JWT_SECRET)\n"
"  --docker-socket PATH  $SMCP_DOCKER_SOCKET (/var/run/docker.sock)\n"
"  --image NAME          $SMCP_SANDBOX_IMAGE (smcp-sandbox:1.18.33)\n"
"  --network NAME        $SMCP_SANDBOX_NET (smcp-sandbox)\n"
"  --egress-url URL      $SMCP_EGRESS_URL: the egress listener as the\n"
"                        sandbox sees it (required)\n"
"  --dns IP              $SMCP_SANDBOX_DNS: sandbox DNS, the gateway\n"
"  --git-host HOST       $SMCP_GIT_HOST: git host the proxy stands in\n"
"                        for (github.com)\n"
"  --concurrency N       $SMCP_CONCURRENCY: runs at once (2)\n"
"  --memory SIZE         $SMCP_SANDBOX_MEMORY: per sandbox (2g)\n"
"  --cpus N              $SMCP_SANDBOX_CPUS: per sandbox (1)\n"
"  --pids N              $SMCP_SANDBOX_PIDS: per sandbox (512)\n"
"  --claim-idle MS       $SMCP_CLAIM_IDLE: take over the runs of a runner\n"
"                        silent this long (60000)\n"
"  --egress-container NAME  $SMCP_EGRESS_CONTAINER: nginx runs in a\n"
"                        container (compose): each session gets its own\n"
"                        internal network, which NAME joins as \"egress\"\n"
"  --max-line SIZE       $SMCP_MAX_LINE: longer log lines are cut, with a\n"
"                        warning event (256k)\n"
"  --diff-max SIZE       $SMCP_DIFF_MAX: bytes kept of a run's diff (10m)\n"
"  --max-event-bytes SIZE  $SMCP_MAX_EVENT_BYTES: a run's stored events;\n"
"                        later output is not stored (64m)\n"
"  --max-result SIZE     $SMCP_MAX_RESULT: bytes kept of a run's result\n"
"                        (256k)\n"
"  --workspace-limit SIZE  $SMCP_WORKSPACE_LIMIT: a session's volume;\n"
"                        a run past it is stopped (10g)\n"
"  --workspace-inodes N  $SMCP_WORKSPACE_INODES: files in a session's\n"
"                        volume (1000000)\n"
"  --janitor-interval S  $SMCP_JANITOR_INTERVAL: idle sessions are\n"
"                        expired this often (60)\n");
}


static const char *
runner_config_get(int argc, char **argv, const char *flag, const char *env,
    const char *def)
{
    int          i;
    const char  *v;

    for (i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], flag) == 0) {
            return argv[i + 1];
        }
    }

    v = env ? getenv(env) : NULL;

    return (v && *v) ? v : def;
}


static int
runner_config_copy(char *dst, size_t size, const char *v, const char *what,
    char *err, size_t errlen)
{
    if (v == NULL) {
        v = "";
    }

    if (strlen(v) >= size) {
        snprintf(err, errlen, "%s is too long", what);
        return RUNNER_ERR;
    }

    strcpy(dst, v);

    return RUNNER_OK;
}


static int64_t
runner_config_size(const char *v)
{
    char     *end;
    int64_t   n, mult;

    n = strtoll(v, &end, 10);
    mult = 1;

    switch (*end) {
    case 'k': case 'K': mult = 1024; end++; break;
    case 'm': case 'M': mult = 1024 * 1024; end++; break;
    case 'g': case 'G': mult = 1024LL * 1024 * 1024; end++; break;
    case 't': case 'T': mult = 1024LL * 1024 * 1024 * 1024; end++; break;
    default: break;
    }

    if (*end != '\0' || n <= 0 || n > INT64_MAX / mult) {
        return -1;
    }

    return n * mult;
}


/* the Redis password: a file (flag, else environment), else the
 * environment's value; none is fine */
static int
runner_config_password(runner_config_t *cfg, int argc, char **argv,
    char *err, size_t errlen)
{
    const char  *v;

    v = runner_config_get(argc, argv, "--redis-password-file",
                          "SMCP_REDIS_PASSWORD_FILE", NULL);

    if (v) {
        return smcp_secret_from_file(v, 1, cfg->redis_password,
                                     &cfg->redis_password_len, err, errlen)
               == SMCP_OK ? RUNNER_OK : RUNNER_ERR;
    }

    v = getenv("SMCP_REDIS_PASSWORD");

    if (v && *v) {
        return smcp_secret_from_env("SMCP_REDIS_PASSWORD", 1,
                                    cfg->redis_password,
                                    &cfg->redis_password_len, err, errlen)
               == SMCP_OK ? RUNNER_OK : RUNNER_ERR;
    }

    return RUNNER_OK;
}


int
runner_config_load(runner_config_t *cfg, int argc, char **argv, char *err,
    size_t errlen)
{
    int          i;
    char         host[128], *colon;
    const char  *v, *known[] = {
        "--redis", "--prefix", "--name", "--secret-file", "--docker-socket",
        "--image", "--network", "--egress-url", "--dns", "--git-host",
        "--concurrency", "--memory", "--cpus", "--pids", "--claim-idle",
        "--egress-container", "--max-line", "--diff-max",
        "--max-event-bytes", "--max-result", "--redis-password-file",
        "--workspace-limit", "--workspace-inodes", "--janitor-interval",
        NULL };
    const char **k;
    double       cpus;

    for (i = 1; i < argc; i += 2) {
        for (k = known; *k; k++) {
            if (strcmp(argv[i], *k) == 0) {
                break;
            }
        }

        if (*k == NULL || i + 1 >= argc) {
            snprintf(err, errlen, "unknown or incomplete option \"%s\"",
                     argv[i]);
            return RUNNER_ERR;
        }
    }

    memset(cfg, 0, sizeof(*cfg));

    v = runner_config_get(argc, argv, "--redis", "SMCP_REDIS",
                          "127.0.0.1:6379");

    if (strncmp(v, "unix:", 5) == 0) {
        if (runner_config_copy(cfg->redis_unix, sizeof(cfg->redis_unix),
                               v + 5, "--redis", err, errlen) != RUNNER_OK)
        {
            return RUNNER_ERR;
        }

    } else {
        if (runner_config_copy(cfg->redis_host, sizeof(cfg->redis_host), v,
                               "--redis", err, errlen) != RUNNER_OK)
        {
            return RUNNER_ERR;
        }

        colon = strrchr(cfg->redis_host, ':');
        cfg->redis_port = 6379;

        if (colon) {
            *colon = '\0';
            cfg->redis_port = atoi(colon + 1);
        }

        if (cfg->redis_port <= 0 || cfg->redis_port > 65535) {
            snprintf(err, errlen, "--redis: bad port in \"%s\"", v);
            return RUNNER_ERR;
        }
    }

    if (gethostname(host, sizeof(host)) != 0) {
        strcpy(host, "runner");
    }

    host[sizeof(host) - 1] = '\0';

    if (runner_config_copy(cfg->prefix, sizeof(cfg->prefix),
            runner_config_get(argc, argv, "--prefix", "SMCP_REDIS_PREFIX",
                              SMCP_DEFAULT_PREFIX), "--prefix", err, errlen)
        || runner_config_copy(cfg->name, sizeof(cfg->name),
            runner_config_get(argc, argv, "--name", "SMCP_RUNNER_NAME", host),
            "--name", err, errlen)
        || runner_config_copy(cfg->docker_socket, sizeof(cfg->docker_socket),
            runner_config_get(argc, argv, "--docker-socket",
                              "SMCP_DOCKER_SOCKET", "/var/run/docker.sock"),
            "--docker-socket", err, errlen)
        || runner_config_copy(cfg->image, sizeof(cfg->image),
            runner_config_get(argc, argv, "--image", "SMCP_SANDBOX_IMAGE",
                              "smcp-sandbox:1.18.33"), "--image", err, errlen)
        || runner_config_copy(cfg->network, sizeof(cfg->network),
            runner_config_get(argc, argv, "--network", "SMCP_SANDBOX_NET",
                              "smcp-sandbox"), "--network", err, errlen)
        || runner_config_copy(cfg->egress_url, sizeof(cfg->egress_url),
            runner_config_get(argc, argv, "--egress-url", "SMCP_EGRESS_URL",
                              NULL), "--egress-url", err, errlen)
        || runner_config_copy(cfg->dns, sizeof(cfg->dns),
            runner_config_get(argc, argv, "--dns", "SMCP_SANDBOX_DNS", NULL),
            "--dns", err, errlen)
        || runner_config_copy(cfg->egress_container,
            sizeof(cfg->egress_container),
            runner_config_get(argc, argv, "--egress-container",
                              "SMCP_EGRESS_CONTAINER", NULL),
            "--egress-container", err, errlen)
        || runner_config_copy(cfg->git_host, sizeof(cfg->git_host),
            runner_config_get(argc, argv, "--git-host", "SMCP_GIT_HOST",
                              "github.com"), "--git-host", err, errlen))
    {
        return RUNNER_ERR;
    }

    if (cfg->egress_url[0] == '\0') {
        snprintf(err, errlen, "--egress-url (or $SMCP_EGRESS_URL) is "
                 "required: the egress listener as sandboxes see it, "
                 "e.g. http://172.29.0.1:8090");
        return RUNNER_ERR;
    }

    cfg->concurrency = atoi(runner_config_get(argc, argv, "--concurrency",
                                              "SMCP_CONCURRENCY", "2"));
    cfg->memory = runner_config_size(runner_config_get(argc, argv,
                                     "--memory", "SMCP_SANDBOX_MEMORY", "2g"));
    cpus = atof(runner_config_get(argc, argv, "--cpus", "SMCP_SANDBOX_CPUS",
                                  "1"));
    cfg->nano_cpus = (int64_t) (cpus * 1e9);
    cfg->pids = atoll(runner_config_get(argc, argv, "--pids",
                                        "SMCP_SANDBOX_PIDS", "512"));
    cfg->claim_idle_ms = atoi(runner_config_get(argc, argv, "--claim-idle",
                                                "SMCP_CLAIM_IDLE", "60000"));
    cfg->diff_max = runner_config_size(runner_config_get(argc, argv,
                                       "--diff-max", "SMCP_DIFF_MAX", "10m"));
    cfg->max_line = runner_config_size(runner_config_get(argc, argv,
                                       "--max-line", "SMCP_MAX_LINE", "256k"));
    cfg->max_event_bytes = runner_config_size(runner_config_get(argc, argv,
                               "--max-event-bytes", "SMCP_MAX_EVENT_BYTES",
                               "64m"));
    cfg->max_result = runner_config_size(runner_config_get(argc, argv,
                          "--max-result", "SMCP_MAX_RESULT", "256k"));
    cfg->workspace_limit = runner_config_size(runner_config_get(argc, argv,
                               "--workspace-limit", "SMCP_WORKSPACE_LIMIT",
                               "10g"));
    cfg->workspace_inodes = runner_config_size(runner_config_get(argc, argv,
                                "--workspace-inodes", "SMCP_WORKSPACE_INODES",
                                "1000000"));
    cfg->janitor_interval = atoi(runner_config_get(argc, argv,
                                 "--janitor-interval",
                                 "SMCP_JANITOR_INTERVAL", "60"));

    {
        char  rnd[17];

        if (smcp_random_hex(rnd, 8) != SMCP_OK) {
            snprintf(err, errlen, "no randomness");
            return RUNNER_ERR;
        }

        snprintf(cfg->instance, sizeof(cfg->instance), "%s/%d/%s",
                 cfg->name, (int) getpid(), rnd);
    }


    if (cfg->concurrency < 1 || cfg->concurrency > 256 || cfg->memory <= 0
        || cfg->nano_cpus <= 0 || cfg->pids <= 0 || cfg->claim_idle_ms < 1000)
    {
        snprintf(err, errlen, "bad --concurrency, --memory, --cpus, --pids "
                 "or --claim-idle");
        return RUNNER_ERR;
    }

    /* lines are held whole in memory: a few per run */
    if (cfg->max_line < 1024 || cfg->max_line > 64 * 1024 * 1024
        || cfg->diff_max < 1024 || cfg->diff_max > 256 * 1024 * 1024
        || cfg->max_event_bytes < 1024 || cfg->max_result < 1024
        || cfg->max_result > 64 * 1024 * 1024)
    {
        snprintf(err, errlen, "bad --max-line (1k..64m), --diff-max "
                 "(1k..256m), --max-event-bytes (1k..) or --max-result "
                 "(1k..64m)");
        return RUNNER_ERR;
    }

    if (cfg->workspace_limit <= 0 || cfg->workspace_inodes <= 0
        || cfg->janitor_interval < 1 || cfg->janitor_interval > 86400)
    {
        snprintf(err, errlen, "bad --workspace-limit, --workspace-inodes or "
                 "--janitor-interval (1..86400)");
        return RUNNER_ERR;
    }

    if (runner_config_password(cfg, argc, argv, err, errlen) != RUNNER_OK) {
        return RUNNER_ERR;
    }

    v = runner_config_get(argc, argv, "--secret-file", "SMCP_SECRET_FILE",
                          NULL);

    if ((v ? smcp_secret_from_file(v, SMCP_SECRET_MIN, cfg->secret,
                                   &cfg->secret_len, err, errlen)
           : smcp_secret_from_env("PROXY_JWT_SECRET", SMCP_SECRET_MIN,
                                  cfg->secret, &cfg->secret_len, err,
                                  errlen))
        != SMCP_OK)
    {
        return RUNNER_ERR;
    }

    return RUNNER_OK;
}
