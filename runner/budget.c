/*
 * The tenant's budgets, as one of its runs meets them (docs/contracts.md,
 * "Tenant budgets").  run_create refuses a new run of a tenant over a
 * budget (nginx's sandbox_mcp_tenant_* directives); the runner keeps the
 * usage they are held against as it writes (events: tenant:{t}:usage
 * `bytes`; workspaces measured: `disk`) and holds running runs to the
 * same budgets (its --tenant-redis-bytes, --tenant-disk: one value on
 * both sides, set by one variable in make up): a run that passes one
 * stores nothing more (one warning) or is stopped.
 * A run of a tenant already over a budget when its turn comes does not
 * start.  Other tenants' runs are not touched: every figure is the
 * tenant's own.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner.h"


/*
 * The run's tenant, from its hash, and its budgets; RUNNER_ERR (err: the
 * words the run fails with) when its tenant is over one already.
 */
int
runner_budget_start(runner_run_t *run, json_t *h, char *err, size_t errlen)
{
    int64_t      bytes, disk;
    const char  *tenant;

    tenant = json_string_value(json_object_get(h, "tenant"));

    run->tenant[0] = '\0';
    run->tenant_bytes = 0;
    run->tenant_bytes_max = runner_config->tenant_bytes;
    run->tenant_disk_max = runner_config->tenant_disk;

    if (tenant == NULL || !smcp_valid_tenant(tenant, strlen(tenant))) {
        return RUNNER_OK;
    }

    strcpy(run->tenant, tenant);

    if (runner_store_usage(run->store, run->tenant, &bytes, &disk)
        != RUNNER_OK)
    {
        return RUNNER_OK;           /* Redis trouble: the writes tell */
    }

    run->tenant_bytes = bytes;

    if (run->tenant_bytes_max && bytes >= run->tenant_bytes_max) {
        snprintf(err, errlen, "tenant budget exceeded: your runs, events "
                 "and diffs hold %lld bytes of Redis, at or over "
                 "sandbox_mcp_tenant_redis_bytes (%lld); the run was not "
                 "started. Ended runs free theirs when their keys expire "
                 "(sandbox_mcp_retention)", (long long) bytes,
                 (long long) run->tenant_bytes_max);
        return RUNNER_ERR;
    }

    if (run->tenant_disk_max && disk >= run->tenant_disk_max) {
        snprintf(err, errlen, "tenant budget exceeded: the workspaces of "
                 "your sessions hold %lld bytes, at or over "
                 "sandbox_mcp_tenant_disk (%lld); the run was not started. "
                 "An idle session's workspace is removed after "
                 "sandbox_mcp_session_idle (opencode_list_sessions lists "
                 "them)", (long long) disk, (long long) run->tenant_disk_max);
        return RUNNER_ERR;
    }

    return RUNNER_OK;
}


/* a re-attached run: its tenant and budgets again (a failure leaves it
 * without: the per-run limits still hold) */
int
runner_budget_resume(runner_run_t *run)
{
    json_t  *h;
    char     err[RUNNER_ERRLEN];

    h = runner_store_run(run->store, run->id);

    if (h == NULL) {
        return RUNNER_ERR;
    }

    (void) runner_budget_start(run, h, err, sizeof(err));
    json_decref(h);

    return RUNNER_OK;
}


/* 1: the tenant's runs hold its budget of Redis bytes, as last seen */
int
runner_budget_event(runner_run_t *run)
{
    return run->tenant_bytes_max && run->tenant_bytes >= run->tenant_bytes_max;
}


/*
 * Before the finish: a diff that would pass the tenant's budget is not
 * stored (the run says so in a warning; the whole diff stays in the
 * workspace, /workspace/.oc/smcp/diff); the outcome's fields are.
 */
void
runner_budget_diff(runner_run_t *run)
{
    int64_t  bytes, disk;
    char     warn[256];

    if (run->diff_dropped || run->out.diff == NULL || run->out.diff_len == 0
        || run->tenant_bytes_max == 0
        || run->tenant[0] == '\0'
        || runner_store_usage(run->store, run->tenant, &bytes, &disk)
           != RUNNER_OK
        || bytes + (int64_t) run->out.diff_len <= run->tenant_bytes_max)
    {
        return;
    }

    run->diff_dropped = 1;

    snprintf(warn, sizeof(warn), "{\"warning\":\"tenant budget exceeded\","
             "\"budget\":\"sandbox_mcp_tenant_redis_bytes\",\"limit\":%lld,"
             "\"held\":%lld,\"diff\":%lld,\"stored\":false}",
             (long long) run->tenant_bytes_max, (long long) bytes,
             (long long) run->out.diff_len);

    /* past the run's own budget too: said all the same */
    (void) runner_store_event(run->store, run->id, run->tenant, "lifecycle",
                              warn, strlen(warn), NULL, 0, &bytes);

    runner_log("info", run->id, "the diff (%lld bytes) is not stored: the "
               "tenant's runs hold %lld bytes of its %lld",
               (long long) run->out.diff_len, (long long) bytes,
               (long long) run->tenant_bytes_max);
}


/*
 * The session's workspace measured (the watchdog): the tenant's disk
 * usage kept; 1 when it is over the tenant's budget (*total: the usage).
 */
int
runner_budget_disk(runner_run_t *run, runner_store_t *st, int64_t bytes,
    int64_t *total)
{
    if (st == NULL || run->tenant[0] == '\0' || run->session[0] == '\0'
        || runner_store_usage_disk(st, run->tenant, run->session, bytes,
                                   total) != RUNNER_OK)
    {
        return 0;
    }

    return run->tenant_disk_max && *total > run->tenant_disk_max;
}
