/*
 * A run's pull request, opened through the egress proxy's GitHub REST
 * route with the run's own token (the runner holds no GitHub token; nginx
 * adds it): POST /github-api/repos/OWNER/REPO/pulls, head
 * opencode/<runId> (the branch the sandbox pushed), base the run's
 * base_branch or the repository's default branch (GET .../repos/OWNER/
 * REPO).  Every byte of an answer is hostile: the answer is bounded, must
 * be JSON, and the pull request's html_url must be on the git host.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "runner.h"


/* words from elsewhere, fit for an error: bounded, printable, UTF-8 */
void
runner_pr_words(char *dst, size_t size, const char *src, size_t len)
{
    size_t  i;

    if (size > RUNNER_PR_MESSAGE_MAX + 1) {
        size = RUNNER_PR_MESSAGE_MAX + 1;
    }

    if (len > size - 1) {
        len = size - 1;

        while (len > 0 && ((unsigned char) src[len] & 0xc0) == 0x80) {
            len--;
        }
    }

    memmove(dst, src, len);
    dst[len] = '\0';

    for (i = 0; i < len; i++) {
        if ((unsigned char) dst[i] < 0x20 || dst[i] == 0x7f) {
            dst[i] = ' ';
        }
    }

    smcp_utf8_sanitize(dst, len);
}


/*
 * One REST call: the HTTP status (0: no answer; err says why), *answer
 * the parsed JSON (NULL when the answer was none).
 */
static long
runner_pr_call(const char *method, const char *path, const char *token,
    const char *body, json_t **answer, char *err, size_t errlen)
{
    long                 status;
    char                 url[1024], *auth;
    CURL                *h;
    CURLcode             cc;
    runner_buf_t         b;
    struct curl_slist   *hdrs;

    *answer = NULL;
    memset(&b, 0, sizeof(b));
    b.max = RUNNER_PR_ANSWER_MAX;

    snprintf(url, sizeof(url), "%s/github-api%s", runner_config->egress_url,
             path);
    auth = malloc(strlen(token) + sizeof("Authorization: Bearer "));
    h = auth ? curl_easy_init() : NULL;

    if (h == NULL) {
        free(auth);
        snprintf(err, errlen, "out of memory");
        return 0;
    }

    strcpy(auth, "Authorization: Bearer ");
    strcat(auth, token);
    hdrs = curl_slist_append(NULL, auth);
    hdrs = curl_slist_append(hdrs, "Accept: application/vnd.github+json");
    hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    hdrs = curl_slist_append(hdrs, "User-Agent: smcp-runner/" SMCP_VERSION);

    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, (long) RUNNER_PR_TIMEOUT_S);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, runner_buf_collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);

    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    }

    cc = curl_easy_perform(h);
    status = 0;

    if (b.over) {
        snprintf(err, errlen, "GitHub's answer is over %d bytes",
                 RUNNER_PR_ANSWER_MAX);

    } else if (cc != CURLE_OK) {
        snprintf(err, errlen, "GitHub not reached: %s",
                 curl_easy_strerror(cc));

    } else {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);

        if (b.data) {
            *answer = json_loadb(b.data, b.len, 0, NULL);
        }

        if (*answer == NULL) {
            snprintf(err, errlen, "GitHub answered HTTP %ld without JSON",
                     status);
        }
    }

    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    free(auth);
    free(b.data);

    return status;
}


/* GitHub's message of an error answer (the egress proxy's own errors are
 * {"error":{"message":...}}): "message: errors[0].message" */
static void
runner_pr_message(json_t *answer, long status, char *buf, size_t size)
{
    char         text[RUNNER_PR_MESSAGE_MAX + 1];
    json_t      *e;
    const char  *m, *d;

    m = json_string_value(json_object_get(answer, "message"));

    if (m == NULL) {
        m = json_string_value(json_object_get(json_object_get(answer,
                                                              "error"),
                                              "message"));
    }

    e = json_array_get(json_object_get(answer, "errors"), 0);
    d = json_string_value(json_object_get(e, "message"));

    if (d == NULL) {
        d = json_string_value(json_object_get(e, "code"));
    }

    snprintf(text, sizeof(text), "%s%s%s", m ? m : "no message",
             d ? ": " : "", d ? d : "");
    runner_pr_words(text, sizeof(text), text, strlen(text));

    snprintf(buf, size, "GitHub answered HTTP %ld: %s", status, text);
}


/* a branch name GitHub may answer: printable ASCII, no space, bounded */
static int
runner_pr_valid_branch(const char *s)
{
    size_t  n;

    n = s ? strlen(s) : 0;

    if (n == 0 || n > 255 || s[0] == '-') {
        return 0;
    }

    for (/* void */; *s; s++) {
        if (*s <= 0x20 || *s >= 0x7f || strchr("~^:?*[\\\"'", *s)) {
            return 0;
        }
    }

    return 1;
}


/* "/repos/OWNER/REPO" of https://<git host>/OWNER/REPO(.git): the names
 * the egress route accepts */
static int
runner_pr_repo_path(const char *url, char *buf, size_t size)
{
    size_t       n, hl;
    const char  *p, *slash;
    char         owner[101], name[101];

    hl = strlen(runner_config->git_host);

    if (url == NULL || strncmp(url, "https://", 8) != 0
        || strncmp(url + 8, runner_config->git_host, hl) != 0
        || url[8 + hl] != '/')
    {
        return RUNNER_ERR;
    }

    p = url + 8 + hl + 1;
    slash = strchr(p, '/');
    n = slash ? (size_t) (slash - p) : 0;

    if (n == 0 || n >= sizeof(owner)) {
        return RUNNER_ERR;
    }

    memcpy(owner, p, n);
    owner[n] = '\0';
    p = slash + 1;
    n = strlen(p);

    if (n > 4 && strcmp(p + n - 4, ".git") == 0) {
        n -= 4;
    }

    if (n == 0 || n >= sizeof(name)) {
        return RUNNER_ERR;
    }

    memcpy(name, p, n);
    name[n] = '\0';

#define RUNNER_PR_NAME  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" \
                        "0123456789_.-"

    if (strspn(owner, RUNNER_PR_NAME) != strlen(owner)
        || strspn(name, RUNNER_PR_NAME) != strlen(name)
        || strcmp(owner, ".") == 0 || strcmp(owner, "..") == 0
        || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
    {
        return RUNNER_ERR;
    }

#undef RUNNER_PR_NAME

    snprintf(buf, size, "/repos/%s/%s", owner, name);

    return RUNNER_OK;
}


/* the title: pr_title, else the run's title, else the task's first
 * non-blank line; bounded, on one line */
static void
runner_pr_title(json_t *h, char *buf, size_t size)
{
    size_t       n;
    const char  *s, *nl;

    s = json_string_value(json_object_get(h, "pr_title"));

    if (s == NULL || *s == '\0') {
        s = json_string_value(json_object_get(h, "title"));
    }

    if (s == NULL || *s == '\0') {
        s = json_string_value(json_object_get(h, "task"));
    }

    s = s ? s : "";
    s += strspn(s, " \t\r\n");
    nl = strpbrk(s, "\r\n");
    n = nl ? (size_t) (nl - s) : strlen(s);

    runner_pr_words(buf, size < RUNNER_PR_TITLE_MAX + 1
                         ? size : RUNNER_PR_TITLE_MAX + 1, s, n);

    if (buf[0] == '\0') {
        snprintf(buf, size, "sandbox-mcp run");
    }
}


/* the body: the result, the files changed, the run page */
static char *
runner_pr_body(runner_run_t *run, json_t *h, const runner_diff_t *diff)
{
    size_t       i, n, cap, len;
    char        *b, line[600];
    json_t      *f;
    const char  *res, *watch, *path;

#define RUNNER_PR_ADD(s, l)                                                   \
    if (len + (l) < cap) { memcpy(b + len, s, l); len += l; b[len] = '\0'; }

    cap = RUNNER_PR_RESULT_MAX + RUNNER_PR_FILES_MAX * sizeof(line) + 2048;
    b = malloc(cap);
    if (b == NULL) {
        return NULL;
    }

    len = 0;
    b[0] = '\0';

    res = run->out.result ? run->out.result : "";
    n = strlen(res);

    if (n > RUNNER_PR_RESULT_MAX) {
        n = RUNNER_PR_RESULT_MAX;

        while (n > 0 && ((unsigned char) res[n] & 0xc0) == 0x80) {
            n--;
        }
    }

    RUNNER_PR_ADD(res, n);
    if (n < strlen(res)) {
        RUNNER_PR_ADD("\n\n[...]", 7);
    }

    n = snprintf(line, sizeof(line), "\n\n### Files changed (%s)\n\n",
                 diff->stat[0] ? diff->stat : "none");
    RUNNER_PR_ADD(line, n);

    json_array_foreach(diff->files, i, f) {
        if (i == RUNNER_PR_FILES_MAX) {
            n = snprintf(line, sizeof(line), "- ... and %zu more\n",
                         json_array_size(diff->files) - i);
            RUNNER_PR_ADD(line, n);
            break;
        }

        path = json_string_value(json_object_get(f, "path"));
        n = snprintf(line, sizeof(line), "- `%.500s` (+%lld -%lld)\n",
                     path ? path : "?",
                     (long long) json_integer_value(json_object_get(f,
                                                          "additions")),
                     (long long) json_integer_value(json_object_get(f,
                                                          "deletions")));
        RUNNER_PR_ADD(line, n < sizeof(line) ? n : sizeof(line) - 1);
    }

    watch = json_string_value(json_object_get(h, "watch_base"));

    if (watch && strlen(watch) < 400 && strcspn(watch, " \t\r\n<>\"") ==
        strlen(watch) && (strncmp(watch, "https://", 8) == 0
                          || strncmp(watch, "http://", 7) == 0))
    {
        n = snprintf(line, sizeof(line), "\nThe run: %s\n", watch);
        RUNNER_PR_ADD(line, n);
    }

    n = snprintf(line, sizeof(line), "\n(sandbox-mcp run %s)\n", run->id);
    RUNNER_PR_ADD(line, n);

#undef RUNNER_PR_ADD

    smcp_utf8_sanitize(b, len);

    return b;
}


/* the pull request's html_url and number from GitHub's 201 */
static int
runner_pr_created(json_t *answer, runner_pr_t *pr)
{
    size_t       hl;
    json_int_t   num;
    const char  *url, *p;

    url = json_string_value(json_object_get(answer, "html_url"));
    num = json_integer_value(json_object_get(answer, "number"));
    hl = strlen(runner_config->git_host);

    if (url == NULL) {
        snprintf(pr->error, sizeof(pr->error), "GitHub's answer has no "
                 "html_url");
        return RUNNER_ERR;
    }

    for (p = url; *p > 0x20 && *p < 0x7f && !strchr("\"'<>\\`", *p); p++) {
        /* void */
    }

    if (*p || strlen(url) >= sizeof(pr->url)
        || strncmp(url, "https://", 8) != 0
        || strncmp(url + 8, runner_config->git_host, hl) != 0
        || url[8 + hl] != '/')
    {
        snprintf(pr->error, sizeof(pr->error), "GitHub's answer has an "
                 "html_url not on https://%s/", runner_config->git_host);
        return RUNNER_ERR;
    }

    if (!json_is_integer(json_object_get(answer, "number")) || num < 1
        || num > 2147483647)
    {
        snprintf(pr->error, sizeof(pr->error), "GitHub's answer has no "
                 "valid number");
        return RUNNER_ERR;
    }

    snprintf(pr->url, sizeof(pr->url), "%s", url);
    snprintf(pr->number, sizeof(pr->number), "%lld", (long long) num);

    return RUNNER_OK;
}


/*
 * The open pull request of head on repo ("/repos/OWNER/REPO"), asked when
 * POST .../pulls gave no clear answer (none, not JSON, a 5xx, a 422):
 * GitHub may have opened it all the same (its answer lost) or before (a
 * pick tried again).  RUNNER_OK: found (pr->url, pr->number), the first
 * of the answer whose head.ref is head and whose state is open.
 */
static int
runner_pr_existing(const char *repo, const char *head, const char *token,
    runner_pr_t *pr)
{
    int          rc;
    long         st;
    char         path[512], err[RUNNER_ERRLEN];
    size_t       i, n;
    json_t      *answer, *e;
    const char  *owner, *slash, *ref, *state;
    runner_pr_t  found;

    owner = repo + sizeof("/repos/") - 1;
    slash = strchr(owner, '/');

    if (slash == NULL
        || strncmp(head, "opencode/", sizeof("opencode/") - 1) != 0)
    {
        return RUNNER_ERR;
    }

    /* head=OWNER:opencode/<id>, ":" and "/" escaped */
    snprintf(path, sizeof(path), "%s/pulls?state=open&head=%.*s%%3Aopencode"
             "%%2F%s", repo, (int) (slash - owner), owner,
             head + sizeof("opencode/") - 1);

    st = runner_pr_call("GET", path, token, NULL, &answer, err, sizeof(err));
    rc = RUNNER_ERR;
    n = (st == 200) ? json_array_size(answer) : 0;

    for (i = 0; i < n && i < 100 && rc != RUNNER_OK; i++) {
        e = json_array_get(answer, i);
        ref = json_string_value(json_object_get(json_object_get(e, "head"),
                                                "ref"));
        state = json_string_value(json_object_get(e, "state"));

        if (ref && state && strcmp(ref, head) == 0
            && strcmp(state, "open") == 0)
        {
            memset(&found, 0, sizeof(found));
            rc = runner_pr_created(e, &found);
        }
    }

    json_decref(answer);

    if (rc == RUNNER_OK) {
        snprintf(pr->url, sizeof(pr->url), "%s", found.url);
        snprintf(pr->number, sizeof(pr->number), "%s", found.number);
    }

    return rc;
}


/*
 * Before each call to GitHub (each up to RUNNER_PR_TIMEOUT_S): the run's
 * queue entry touched, so that no other runner takes it for one whose
 * runner is gone (--claim-idle) while this one waits; the watchdog that
 * touches it while the sandbox runs is done by now, and a pick run has
 * none.
 */
static void
runner_pr_touch(runner_run_t *run)
{
    if (run->stream_id[0]) {
        (void) runner_store_touch(run->store, run->stream_id);
    }
}


/* 1 when the run's cancel was asked (opencode_cancel_run) */
static int
runner_pr_cancel_asked(runner_run_t *run)
{
    int             cancel;
    runner_spend_t  spend;

    return runner_store_limits(run->store, run->id, &cancel, &spend)
           == RUNNER_OK && cancel;
}


/*
 * Opens the pull request of a run whose sandbox pushed opencode/<runId>:
 * RUNNER_OK (pr->url, pr->number), else RUNNER_ERR (pr->error says why).
 * h: the run hash; token: an egress token of the run.
 */
static int
runner_pr_open(runner_run_t *run, json_t *h, const char *token,
    const runner_diff_t *diff, runner_pr_t *pr)
{
    int          rc;
    long         st;
    char         repo[256], path[300], title[RUNNER_PR_TITLE_MAX + 1];
    char         base[256], head[64], err[RUNNER_ERRLEN], *body, *req;
    json_t      *answer, *o;
    const char  *b;

    if (runner_pr_repo_path(json_string_value(json_object_get(h,
                                                              "repository")),
                            repo, sizeof(repo))
        != RUNNER_OK)
    {
        snprintf(pr->error, sizeof(pr->error), "the run's repository is not "
                 "on https://%s/", runner_config->git_host);
        return RUNNER_ERR;
    }

    /* the base: the run's, else the repository's default branch */
    b = json_string_value(json_object_get(h, "base_branch"));
    base[0] = '\0';

    if (b && *b) {
        snprintf(base, sizeof(base), "%s", b);

    } else {
        runner_pr_touch(run);
        st = runner_pr_call("GET", repo, token, NULL, &answer, err,
                            sizeof(err));
        b = json_string_value(json_object_get(answer, "default_branch"));

        if (st == 200 && runner_pr_valid_branch(b)) {
            snprintf(base, sizeof(base), "%s", b);

        } else if (st == 0 || answer == NULL) {
            snprintf(pr->error, sizeof(pr->error), "%s", err);

        } else if (st == 200) {
            snprintf(pr->error, sizeof(pr->error), "GitHub's answer has no "
                     "valid default_branch");

        } else {
            runner_pr_message(answer, st, pr->error, sizeof(pr->error));
        }

        json_decref(answer);

        if (base[0] == '\0') {
            return RUNNER_ERR;
        }
    }

    if (!runner_pr_valid_branch(base)) {
        snprintf(pr->error, sizeof(pr->error), "the base branch is not a "
                 "valid branch name");
        return RUNNER_ERR;
    }

    /* a pick run opens the attempt's branch (pick.c) */
    runner_pr_title(h, title, sizeof(title));
    snprintf(head, sizeof(head), "opencode/%s",
             run->pick_of[0] ? run->pick_of : run->id);
    body = runner_pr_body(run, h, diff);

    o = json_pack("{s:s, s:s, s:s, s:s, s:b}", "title", title, "head", head,
                  "base", base, "body", body ? body : "",
                  "draft", strcmp(json_string_value(json_object_get(h,
                                                        "draft")) ?: "",
                                  "1") == 0);
    free(body);

    req = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);

    if (req == NULL) {
        snprintf(pr->error, sizeof(pr->error), "out of memory");
        return RUNNER_ERR;
    }

    /* a pick run has no watchdog: its cancel, read before its base was
     * looked up, is read again at the last moment before the POST */
    if (run->pick_of[0] && runner_pr_cancel_asked(run)) {
        free(req);
        run->pr_cancelled = 1;
        snprintf(pr->error, sizeof(pr->error), "cancelled");
        return RUNNER_ERR;
    }

    snprintf(path, sizeof(path), "%s/pulls", repo);
    runner_pr_touch(run);
    st = runner_pr_call("POST", path, token, req, &answer, err, sizeof(err));
    free(req);

    if (st == 201 && answer) {
        rc = runner_pr_created(answer, pr);

    } else {
        rc = RUNNER_ERR;

        if (st == 0 || answer == NULL) {
            snprintf(pr->error, sizeof(pr->error), "%s", err);

        } else {
            runner_pr_message(answer, st, pr->error, sizeof(pr->error));
        }
    }

    json_decref(answer);

    /* no clear answer: it may be open all the same */
    if (rc != RUNNER_OK && (st == 0 || st == 422 || st >= 500)) {
        runner_pr_touch(run);

        if (runner_pr_existing(repo, head, token, pr) == RUNNER_OK) {
            runner_log("info", run->id, "the pull request of %s is open "
                       "(GitHub's answer to opening it: %.200s)", head,
                       pr->error);
            pr->error[0] = '\0';
            rc = RUNNER_OK;
        }
    }

    return rc;
}


/*
 * What a completed run's pull request came to (run->pr): none asked for
 * (create_pr not "1", no repository: status NULL), the sandbox's push
 * failed or pushed nothing (failed), no changes, or the pull request
 * opened with token (NULL: none could be signed).  Returns the pr_opened
 * event to store (the caller frees it), or NULL.
 */
char *
runner_pr_finish(runner_run_t *run, json_t *h, const char *token,
    const runner_diff_t *diff)
{
    char         *ev;
    json_t       *o;
    const char   *cp, *repo;
    runner_pr_t  *pr = &run->pr;

    cp = json_string_value(json_object_get(h, "create_pr"));
    repo = json_string_value(json_object_get(h, "repository"));

    if (cp == NULL || strcmp(cp, "1") != 0 || repo == NULL || *repo == '\0') {
        return NULL;
    }

    pr->status = "failed";

    switch (run->out.pr_step) {

    case RUNNER_PR_PUSHED:
        /* an attempt whose pull request waits for its pick
         * (opencode_pick_attempt): its branch pushed, no more */
        if (strcmp(json_string_value(json_object_get(h, "pr_pick")) ?: "",
                   "1") == 0)
        {
            pr->status = "pushed";
            return NULL;
        }

        if (token == NULL) {
            snprintf(pr->error, sizeof(pr->error), "cannot sign the run "
                     "token");
            return NULL;
        }

        if (runner_pr_open(run, h, token, diff, pr) != RUNNER_OK) {
            return NULL;
        }

        pr->status = "opened";
        o = json_pack("{s:s, s:s, s:s, s:I}", "type", "smcp",
                      "step", "pr_opened", "url", pr->url,
                      "number", (json_int_t) atoll(pr->number));
        ev = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);

        return ev;

    case RUNNER_PR_PUSH_FAILED:
        snprintf(pr->error, sizeof(pr->error), "git push failed: %s",
                 run->out.push_error ? run->out.push_error : "");
        return NULL;

    case RUNNER_PR_SKIPPED:
        pr->status = "no_changes";
        return NULL;

    default:
        snprintf(pr->error, sizeof(pr->error), "the sandbox pushed no "
                 "branch for the pull request");
        return NULL;
    }
}
