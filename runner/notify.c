/*
 * Completion notifications.  A run started with opencode_run_task's
 * `notify` ({url, format}) is listed in the `notify` zset once it ends
 * (finish.lua, run_cancel.lua), scored by when its next attempt is due.
 * RUNNER_NOTIFY_SENDERS threads per runner, each every
 * RUNNER_NOTIFY_TICK_MS, take the runs due (at most RUNNER_NOTIFY_BATCH),
 * claim each attempt (notify_claim.lua: a lease, so that no other sender,
 * of this runner or another, sends it meanwhile: a destination that never
 * answers holds one sender up to RUNNER_NOTIFY_TIMEOUT_S, and the others
 * go on), make the message (json, slack or ntfy) from the run hash and
 * POST it to the egress proxy's /notify route with a token of scope
 * `notify`; the egress checks the destination against its own allowlist
 * and forwards the request (the runner itself reaches no other host).  A
 * 2xx answer: delivered; else it is tried again after 1, 2, 4 ... 300 s
 * until --notify-window has passed since the first attempt, then given
 * up.  Every attempt is a `notify`
 * event of the run (notify_result.lua).  Several runners may run it at
 * once; a runner stopping leaves `notify` as it is (the lease runs out,
 * another runner, or this one restarted, goes on).
 *
 * Everything read back from Redis is hostile: bounded (store_notify.c),
 * the URLs checked before they are used (a notify_url the module would
 * not take, common/smcp_url.c, is given up, never sent), the bodies made
 * with jansson, the answer read up to RUNNER_NOTIFY_ANSWER_MAX bytes.
 * Neither a token nor the destination's path (a Slack webhook's path is
 * its secret) is logged or stored.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "runner.h"
#include "smcp_jwt.h"


#define RUNNER_NOTIFY_TASK_SIZE   (RUNNER_NOTIFY_TASK_CHARS * 4 + 1)
#define RUNNER_NOTIFY_ERROR_SIZE  (RUNNER_NOTIFY_ERROR_CHARS * 4 + 1)
#define RUNNER_NOTIFY_HEADER_MAX  (RUNNER_NOTIFY_URL_MAX + SMCP_JWT_MAX_LEN \
                                   + 64)

/* an attempt's results: runner_notify_results' */
#define RUNNER_NOTIFY_DELIVERED   0
#define RUNNER_NOTIFY_RETRYING    1
#define RUNNER_NOTIFY_FAILED      2
#define RUNNER_NOTIFY_STOPPED     -1    /* the runner stops: the attempt
                                           is left to its lease */


/* as notify_result.lua and the metrics name them */
static const char  *runner_notify_results[] = {
    "delivered", "retrying", "failed"
};

/* how a run ended, as a message says it */
static const struct {
    const char  *status;
    const char  *title;             /* ntfy's Title, Slack's first words */
    const char  *tag;               /* ntfy's Tags */
} runner_notify_ends[] = {
    { SMCP_STATUS_COMPLETED, "Run completed", "white_check_mark" },
    { SMCP_STATUS_FAILED, "Run failed", "x" },
    { SMCP_STATUS_CANCELLED, "Run cancelled", "no_entry_sign" },
};

#define RUNNER_NOTIFY_ENDS                                                    \
    (sizeof(runner_notify_ends) / sizeof(runner_notify_ends[0]))
#define RUNNER_NOTIFY_COMPLETED   0     /* runner_notify_ends' first */


/* one attempt's message, made of the run hash's values (checked) */
typedef struct {
    const char             *id;
    runner_notify_claim_t   claim;
    runner_notify_run_t     run;            /* as read back */
    int                     end;            /* of runner_notify_ends */
    const char             *status;         /* its status */
    const char             *format;         /* json | slack | ntfy */
    char                    event[32];      /* run.<status> */
    char                    origin[RUNNER_NOTIFY_URL_MAX + 2];  /* the
                                               url's scheme://host[:port]/:
                                               what may be shown */
    char                    why[128];       /* notify_url's refusal */
    char                    task[RUNNER_NOTIFY_TASK_SIZE];  /* first line */
    char                    title[RUNNER_NOTIFY_TASK_SIZE];
    char                    error[RUNNER_NOTIFY_ERROR_SIZE];
    int64_t                 finished_at;    /* -1: none */
    char                   *watch;          /* the run page with a ui
                                               token (malloc'd), or NULL */
} runner_notify_msg_t;


/*
 * An http(s) URL fit to be a link of the message (the pull request, the
 * run page): at most max bytes, printable ASCII without spaces, a host
 * after the scheme, none of < > | " (a Slack link is <url|text>).  Looser
 * than notify_url's check (common/smcp_url.c): a link is shown, nothing is
 * sent to it (a pull request's path, a run page's port are as they come).
 */
static int
runner_notify_link_ok(const char *s, size_t max)
{
    size_t       n;
    const char  *p;

    n = strlen(s);

    if (strncmp(s, "https://", 8) == 0) {
        p = s + 8;

    } else if (strncmp(s, "http://", 7) == 0) {
        p = s + 7;

    } else {
        return 0;
    }

    if (n > max || *p == '\0' || *p == '/') {
        return 0;
    }

    for (p = s; *p; p++) {
        if ((unsigned char) *p <= 0x20 || (unsigned char) *p >= 0x7f
            || strchr("<>|\"", *p) != NULL)
        {
            return 0;
        }
    }

    return 1;
}


/*
 * Text (valid UTF-8) into dst: at most max characters, cut at a
 * character's boundary to fit; line: only its first non-blank line.
 * Control characters are made spaces (line breaks too, in a line).
 */
static void
runner_notify_text(char *dst, size_t size, const char *src, size_t max,
    int line)
{
    size_t          i, chars;
    unsigned char   c;

    if (line) {
        src += strspn(src, " \t\r\n");
    }

    chars = 0;

    for (i = 0; src[i] && i < size - 1; i++) {
        c = (unsigned char) src[i];

        if (line && (c == '\r' || c == '\n')) {
            break;
        }

        if ((c & 0xc0) != 0x80 && chars++ == max) {
            break;
        }

        dst[i] = ((c < 0x20 && (line || c != '\n')) || c == 0x7f) ? ' ' : c;
    }

    /* a character the buffer's end cut: out */
    while (i > 0 && ((unsigned char) src[i] & 0xc0) == 0x80) {
        i--;
    }

    dst[i] = '\0';
}


/* a delivery id: 32 lowercase hex digits */
static int
runner_notify_delivery_ok(const char *s)
{
    return strlen(s) == RUNNER_NOTIFY_ID_LEN
           && strspn(s, "0123456789abcdef") == RUNNER_NOTIFY_ID_LEN;
}


/* a number of the run hash: digits only, else -1 */
static int64_t
runner_notify_number(const char *s)
{
    char     *end;
    int64_t   n;

    if (*s < '0' || *s > '9') {
        return -1;
    }

    n = strtoll(s, &end, 10);

    return (*end == '\0' && n >= 0 && n < INT64_MAX) ? n : -1;
}


/* a token of the run: scope notify (60 s) or ui (the watch link's ttl,
 * with a jti: `make revoke` can withdraw it); malloc'd, NULL: failed */
static char *
runner_notify_token(runner_notify_msg_t *msg, const char *scope,
    int64_t ttl)
{
    char     jti[33];
    time_t   now;
    json_t  *claims;

    now = time(NULL);

    claims = json_pack("{s:s, s:s, s:s, s:I, s:I}", "sub", msg->run.tenant,
                       "scope", scope, "run", msg->id,
                       "iat", (json_int_t) now,
                       "exp", (json_int_t) (now + ttl));

    if (claims && strcmp(scope, SMCP_SCOPE_UI) == 0
        && (smcp_random_id_hex(jti, 16) != SMCP_OK
            || json_object_set_new(claims, "jti", json_string(jti)) != 0))
    {
        json_decref(claims);
        claims = NULL;
    }

    return runner_run_sign(claims);
}


/*
 * The message's values, checked: NULL, or why it cannot be sent (it is
 * given up).  The watch link is made here (none when watch_base, the run
 * page's URL, is not a fit one).
 */
static const char *
runner_notify_check(runner_notify_msg_t *msg)
{
    size_t                 i, n;
    int64_t                ttl;
    char                  *token;
    smcp_url_t             u;
    const char            *why;
    runner_notify_run_t   *r = &msg->run;

    why = smcp_url_parse(r->url, strlen(r->url), &u);

    if (why) {
        snprintf(msg->why, sizeof(msg->why), "notify_url %s", why);
        return msg->why;
    }

    if (smcp_url_origin(&u, msg->origin, sizeof(msg->origin)) != SMCP_OK) {
        return "notify_url's origin does not fit";
    }

    if (!runner_notify_delivery_ok(msg->claim.delivery)) {
        return "notify_delivery is not 32 hex digits";
    }

    for (i = 0; i < RUNNER_NOTIFY_ENDS; i++) {
        if (strcmp(r->status, runner_notify_ends[i].status) == 0) {
            break;
        }
    }

    if (i == RUNNER_NOTIFY_ENDS) {
        return "the run has not ended (its status is not completed, failed "
               "or cancelled)";
    }

    msg->end = (int) i;
    msg->status = runner_notify_ends[i].status;

    if (!smcp_valid_tenant(r->tenant, strlen(r->tenant))) {
        return "the run has no valid tenant";
    }

    snprintf(msg->event, sizeof(msg->event), "run.%s", msg->status);

    msg->format = strcmp(r->format, "slack") == 0 ? "slack"
                  : strcmp(r->format, "ntfy") == 0 ? "ntfy" : "json";

    runner_notify_text(msg->task, sizeof(msg->task), r->task,
                       RUNNER_NOTIFY_TASK_CHARS, 1);
    runner_notify_text(msg->title, sizeof(msg->title), r->title,
                       RUNNER_NOTIFY_TASK_CHARS, 1);
    runner_notify_text(msg->error, sizeof(msg->error), r->error,
                       RUNNER_NOTIFY_ERROR_CHARS, 0);
    runner_notify_text(r->diff_stat, sizeof(r->diff_stat), r->diff_stat,
                       sizeof(r->diff_stat), 1);

    if (!runner_notify_link_ok(r->pr_url, RUNNER_PR_URL_MAX - 1)) {
        r->pr_url[0] = '\0';
    }

    if (!smcp_valid_id(r->session, strlen(r->session),
                       SMCP_SESSION_ID_PREFIX))
    {
        r->session[0] = '\0';
    }

    msg->finished_at = runner_notify_number(r->finished_at);

    if (!runner_notify_link_ok(r->page, RUNNER_NOTIFY_URL_MAX)) {
        return NULL;
    }

    ttl = runner_notify_number(r->ttl);
    ttl = ttl < 0 ? RUNNER_NOTIFY_TTL_DEFAULT
          : ttl < RUNNER_NOTIFY_TTL_MIN ? RUNNER_NOTIFY_TTL_MIN
          : ttl > RUNNER_NOTIFY_TTL_MAX ? RUNNER_NOTIFY_TTL_MAX : ttl;

    token = runner_notify_token(msg, SMCP_SCOPE_UI, ttl);

    if (token) {
        n = strlen(r->page) + sizeof("?token=") + strlen(token);
        msg->watch = malloc(n);

        if (msg->watch) {
            snprintf(msg->watch, n, "%s?token=%s", r->page, token);
        }

        free(token);
    }

    return NULL;
}


/* key: value into o, when the value is not "" */
static void
runner_notify_set(json_t *o, const char *key, const char *value)
{
    if (value && value[0]) {
        json_object_set_new(o, key, json_string(value));
    }
}


/* the json format: one object of the run (malloc'd, NULL: no memory) */
static char *
runner_notify_json(runner_notify_msg_t *msg)
{
    char    *body;
    json_t  *o;

    o = json_pack("{s:s, s:s, s:s}", "event", msg->event,
                  "deliveryId", msg->claim.delivery, "runId", msg->id);

    if (o == NULL) {
        return NULL;
    }

    runner_notify_set(o, "sessionId", msg->run.session);
    runner_notify_set(o, "status", msg->status);
    json_object_set_new(o, "task", json_string(msg->task));
    runner_notify_set(o, "title", msg->title);
    runner_notify_set(o, "diffStat", msg->run.diff_stat);
    runner_notify_set(o, "pullRequestUrl", msg->run.pr_url);

    if (msg->end != RUNNER_NOTIFY_COMPLETED) {
        runner_notify_set(o, "error", msg->error);
    }

    if (msg->finished_at >= 0) {
        json_object_set_new(o, "finishedAt",
                            json_integer((json_int_t) msg->finished_at));
    }

    runner_notify_set(o, "watchUrl", msg->watch);

    body = json_dumps(o, JSON_COMPACT);
    json_decref(o);

    return body;
}


/* s onto b (which has room: its size was counted), & < > escaped for
 * Slack's mrkdwn when esc is set */
static size_t
runner_notify_add(char *b, size_t len, const char *s, int esc)
{
    for (/* void */; *s; s++) {
        if (esc && *s == '&') {
            memcpy(b + len, "&amp;", 5);
            len += 5;

        } else if (esc && (*s == '<' || *s == '>')) {
            memcpy(b + len, *s == '<' ? "&lt;" : "&gt;", 4);
            len += 4;

        } else {
            b[len++] = *s;
        }
    }

    b[len] = '\0';

    return len;
}


/*
 * The slack format: {"text": mrkdwn}, "*Run completed*: <task>", then the
 * error (a run that did not complete), the diff's stat, the pull request
 * and the run page as links, a line each (when there are).
 */
static char *
runner_notify_slack(runner_notify_msg_t *msg)
{
    char    *text, *body;
    size_t   cap, n;
    json_t  *o;

    /* escaped text grows five times at most; the links as they are */
    cap = 5 * (strlen(msg->task) + strlen(msg->error)
               + strlen(msg->run.diff_stat))
          + strlen(msg->run.pr_url) + (msg->watch ? strlen(msg->watch) : 0)
          + 128;

    text = malloc(cap);
    if (text == NULL) {
        return NULL;
    }

    n = runner_notify_add(text, 0, "*", 0);
    n = runner_notify_add(text, n, runner_notify_ends[msg->end].title, 0);
    n = runner_notify_add(text, n, "*: ", 0);
    n = runner_notify_add(text, n, msg->task, 1);

    if (msg->end != RUNNER_NOTIFY_COMPLETED && msg->error[0]) {
        n = runner_notify_add(text, n, "\n", 0);
        n = runner_notify_add(text, n, msg->error, 1);
    }

    if (msg->run.diff_stat[0]) {
        n = runner_notify_add(text, n, "\n", 0);
        n = runner_notify_add(text, n, msg->run.diff_stat, 1);
    }

    if (msg->run.pr_url[0]) {
        n = runner_notify_add(text, n, "\n<", 0);
        n = runner_notify_add(text, n, msg->run.pr_url, 0);
        n = runner_notify_add(text, n, "|Pull request>", 0);
    }

    if (msg->watch) {
        n = runner_notify_add(text, n, "\n<", 0);
        n = runner_notify_add(text, n, msg->watch, 0);
        (void) runner_notify_add(text, n, "|Watch the run>", 0);
    }

    o = json_pack("{s:s}", "text", text);
    body = o ? json_dumps(o, JSON_COMPACT) : NULL;

    json_decref(o);
    free(text);

    return body;
}


/* the ntfy format: the task's line, the diff's stat, the pull request, a
 * line each (when there are); the rest is in headers */
static char *
runner_notify_ntfy(runner_notify_msg_t *msg)
{
    char        *body;
    size_t       cap, n, i;
    const char  *line[3];

    line[0] = msg->task;
    line[1] = msg->run.diff_stat;
    line[2] = msg->run.pr_url;

    cap = strlen(line[0]) + strlen(line[1]) + strlen(line[2]) + 3;
    body = malloc(cap);

    if (body == NULL) {
        return NULL;
    }

    n = 0;
    body[0] = '\0';

    for (i = 0; i < 3; i++) {
        if (line[i][0]) {
            n = runner_notify_add(body, n, n ? "\n" : "", 0);
            n = runner_notify_add(body, n, line[i], 0);
        }
    }

    return body;
}


/* X-SMCP-Signature's hex: HMAC-SHA256(secret, ts "." body); RUNNER_ERR:
 * OpenSSL failed */
static int
runner_notify_sign(const char *ts, const char *body, size_t len, char *hex)
{
    int             ok, i;
    size_t          outl;
    EVP_MAC        *m;
    OSSL_PARAM      params[2];
    EVP_MAC_CTX    *ctx;
    unsigned char   mac[32];

    m = EVP_MAC_fetch(NULL, "HMAC", NULL);
    ctx = m ? EVP_MAC_CTX_new(m) : NULL;
    EVP_MAC_free(m);

    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
                                                 (char *) "SHA256", 0);
    params[1] = OSSL_PARAM_construct_end();

    ok = ctx != NULL
         && EVP_MAC_init(ctx, runner_config->notify_secret.data,
                         runner_config->notify_secret.len, params)
         && EVP_MAC_update(ctx, (const unsigned char *) ts, strlen(ts))
         && EVP_MAC_update(ctx, (const unsigned char *) ".", 1)
         && EVP_MAC_update(ctx, (const unsigned char *) body, len)
         && EVP_MAC_final(ctx, mac, &outl, sizeof(mac))
         && outl == sizeof(mac);

    EVP_MAC_CTX_free(ctx);

    if (!ok) {
        return RUNNER_ERR;
    }

    for (i = 0; i < 32; i++) {
        snprintf(hex + 2 * i, 3, "%02x", mac[i]);
    }

    OPENSSL_cleanse(mac, sizeof(mac));

    return RUNNER_OK;
}


/* "Name: value" onto the list; *ok 0 once one failed */
static struct curl_slist *
runner_notify_header(struct curl_slist *l, const char *name,
    const char *value, int *ok)
{
    char                line[RUNNER_NOTIFY_HEADER_MAX];
    struct curl_slist  *t;

    /* "Name:": curl sends none of its own (Expect) */
    snprintf(line, sizeof(line), "%s:%s%s", name, value[0] ? " " : "",
             value);
    t = curl_slist_append(l, line);
    OPENSSL_cleanse(line, strlen(line));

    if (t == NULL) {
        *ok = 0;
        return l;
    }

    return t;
}


/* a transfer under way: stopped when the runner stops */
static int
runner_notify_progress(void *data, curl_off_t dltotal, curl_off_t dlnow,
    curl_off_t ultotal, curl_off_t ulnow)
{
    return atomic_load(&runner_stop) ? 1 : 0;
}


/* the request's headers (the token's, the message's, the signature's);
 * NULL: out of memory, or the signature failed */
static struct curl_slist *
runner_notify_headers(runner_notify_msg_t *msg, const char *token,
    const char *body, size_t len)
{
    int                 ok;
    char                ts[32], sig[80], hex[65];
    char                bearer[SMCP_JWT_MAX_LEN + 8];
    struct curl_slist  *h;

    ok = 1;
    snprintf(ts, sizeof(ts), "%lld", (long long) time(NULL));

    /* the bearer token: never logged */
    snprintf(bearer, sizeof(bearer), "Bearer %s", token);
    h = runner_notify_header(NULL, "Authorization", bearer, &ok);
    OPENSSL_cleanse(bearer, sizeof(bearer));

    h = runner_notify_header(h, "X-SMCP-Notify-To", msg->run.url, &ok);
    h = runner_notify_header(h, "X-SMCP-Delivery", msg->claim.delivery, &ok);
    h = runner_notify_header(h, "X-SMCP-Event", msg->event, &ok);
    h = runner_notify_header(h, "X-SMCP-Timestamp", ts, &ok);

    if (runner_config->notify_secret.len) {
        if (runner_notify_sign(ts, body, len, hex) != RUNNER_OK) {
            hex[0] = '\0';
            ok = 0;
        }

        snprintf(sig, sizeof(sig), "sha256=%s", hex);
        h = runner_notify_header(h, "X-SMCP-Signature", sig, &ok);
    }

    if (strcmp(msg->format, "ntfy") == 0) {
        h = runner_notify_header(h, "Content-Type",
                                 "text/plain; charset=utf-8", &ok);
        h = runner_notify_header(h, "Title",
                                 runner_notify_ends[msg->end].title, &ok);

        if (msg->watch) {
            h = runner_notify_header(h, "Click", msg->watch, &ok);
        }

        h = runner_notify_header(h, "Tags", runner_notify_ends[msg->end].tag,
                                 &ok);
        h = runner_notify_header(h, "Priority", "default", &ok);

    } else {
        h = runner_notify_header(h, "Content-Type", "application/json", &ok);
    }

    h = runner_notify_header(h, "User-Agent", "smcp-runner/" SMCP_VERSION,
                             &ok);
    h = runner_notify_header(h, "Expect", "", &ok);

    if (!ok) {
        curl_slist_free_all(h);
        return NULL;
    }

    return h;
}


/* the receiver's (or the egress's) words for an answer that is not 2xx:
 * the JSON's error when it is one ({"error": "..."} or {"error":
 * {"message": "..."}}), else the text */
static void
runner_notify_answer(runner_buf_t *b, long status, char *err, size_t errlen)
{
    char         words[RUNNER_PR_MESSAGE_MAX + 1];
    json_t      *j, *e0;
    const char  *e;

    j = b->data ? json_loadb(b->data, b->len, 0, NULL) : NULL;
    e0 = json_object_get(j, "error");
    e = json_is_object(e0) ? json_string_value(json_object_get(e0, "message"))
                           : json_string_value(e0);

    if (e) {
        runner_pr_words(words, sizeof(words), e, strlen(e));

    } else {
        runner_pr_words(words, sizeof(words), b->data ? b->data : "",
                        b->len);
    }

    json_decref(j);

    snprintf(err, errlen, "HTTP %ld%s%s%s", status, words[0] ? ": " : "",
             words, b->over ? " [...]" : "");
}


/*
 * One POST to the egress's /notify, within RUNNER_NOTIFY_TIMEOUT_S: the
 * HTTP status (0: none, err says why; RUNNER_NOTIFY_STOPPED: the runner
 * stops), err the answer's words when it is not 2xx (the answer read up
 * to RUNNER_NOTIFY_ANSWER_MAX bytes).
 */
static long
runner_notify_send(runner_notify_msg_t *msg, const char *body, char *err,
    size_t errlen)
{
    long                 status;
    char                 url[sizeof(runner_config->egress_url) + 16];
    char                *token;
    CURL                *h;
    CURLcode             cc;
    runner_buf_t         b;
    struct curl_slist   *hdrs;

    token = runner_notify_token(msg, SMCP_SCOPE_NOTIFY,
                                RUNNER_NOTIFY_TOKEN_S);
    hdrs = token ? runner_notify_headers(msg, token, body, strlen(body))
                 : NULL;
    h = hdrs ? curl_easy_init() : NULL;

    if (token) {
        OPENSSL_cleanse(token, strlen(token));
        free(token);
    }

    if (h == NULL) {
        curl_slist_free_all(hdrs);
        snprintf(err, errlen, "the request was not made (its token, its "
                 "signature or memory failed)");
        return 0;
    }

    memset(&b, 0, sizeof(b));
    b.max = RUNNER_NOTIFY_ANSWER_MAX;

    snprintf(url, sizeof(url), "%s/notify", runner_config->egress_url);

    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long) strlen(body));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, (long) RUNNER_NOTIFY_TIMEOUT_S);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, runner_buf_collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, runner_notify_progress);

    cc = curl_easy_perform(h);
    status = 0;

    if (cc == CURLE_ABORTED_BY_CALLBACK) {
        status = RUNNER_NOTIFY_STOPPED;

    } else if (cc == CURLE_OK || (cc == CURLE_WRITE_ERROR && b.over)) {
        /* an answer longer than its cap: its status, its first bytes */
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);

        if (status < 200 || status > 299) {
            runner_notify_answer(&b, status, err, errlen);
        }

    } else {
        snprintf(err, errlen, "no answer from the egress: %s",
                 curl_easy_strerror(cc));
    }

    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    free(b.data);

    return status;
}


/* the wait before attempt n + 1: 2^(n-1) s, at most
 * RUNNER_NOTIFY_BACKOFF_MAX_S */
static int64_t
runner_notify_backoff(long long attempt)
{
    int64_t  s;

    for (s = 1; attempt > 1 && s < RUNNER_NOTIFY_BACKOFF_MAX_S; attempt--) {
        s *= 2;
    }

    return s < RUNNER_NOTIFY_BACKOFF_MAX_S ? s : RUNNER_NOTIFY_BACKOFF_MAX_S;
}


/* the attempt's `notify` event (malloc'd; NULL: no memory) */
static char *
runner_notify_event(runner_notify_msg_t *msg, long status, const char *err,
    int64_t next, int result)
{
    char    *data, why[RUNNER_NOTIFY_ERROR_SIZE];
    json_t  *o;

    o = json_pack("{s:I, s:s, s:I, s:s}",
                  "attempt", (json_int_t) msg->claim.attempt,
                  "url", msg->origin, "status", (json_int_t) status,
                  "result", runner_notify_results[result]);

    if (o == NULL) {
        return NULL;
    }

    if (runner_notify_delivery_ok(msg->claim.delivery)) {
        runner_notify_set(o, "deliveryId", msg->claim.delivery);
    }

    if (result != RUNNER_NOTIFY_DELIVERED) {
        runner_notify_text(why, sizeof(why), err, RUNNER_NOTIFY_ERROR_CHARS,
                           1);
        runner_notify_set(o, "error", why);
    }

    if (next >= 0) {
        json_object_set_new(o, "next", json_integer((json_int_t) next));
    }

    data = json_dumps(o, JSON_COMPACT);
    json_decref(o);

    return data;
}


/* the message, in its format (malloc'd; NULL: no memory) */
static char *
runner_notify_body(runner_notify_msg_t *msg)
{
    if (strcmp(msg->format, "slack") == 0) {
        return runner_notify_slack(msg);
    }

    if (strcmp(msg->format, "ntfy") == 0) {
        return runner_notify_ntfy(msg);
    }

    return runner_notify_json(msg);
}


/* the attempt made (or not: why), and what it came to */
static int
runner_notify_attempt(runner_notify_msg_t *msg, long *status, char *err,
    size_t errlen)
{
    char        *body;
    const char  *why;

    *status = 0;
    err[0] = '\0';

    why = runner_notify_check(msg);

    if (why) {
        snprintf(err, errlen, "%s: given up, nothing sent", why);
        return RUNNER_NOTIFY_FAILED;
    }

    body = runner_notify_body(msg);

    if (body == NULL) {
        snprintf(err, errlen, "the message was not made (memory)");
        return RUNNER_NOTIFY_RETRYING;
    }

    *status = runner_notify_send(msg, body, err, errlen);
    free(body);

    if (*status == RUNNER_NOTIFY_STOPPED) {
        return RUNNER_NOTIFY_STOPPED;
    }

    return (*status >= 200 && *status <= 299) ? RUNNER_NOTIFY_DELIVERED
                                               : RUNNER_NOTIFY_RETRYING;
}


/* one run due: its attempt claimed, made, and its result stored; 1 when
 * it was claimed */
static int
runner_notify_one(runner_store_t *st, const char *id)
{
    int                   rc, result;
    long                  status;
    int64_t               now, first, next;
    char                  delivery[RUNNER_NOTIFY_ID_LEN + 1];
    char                  word[RUNNER_ERRLEN], err[RUNNER_NOTIFY_ERROR_SIZE];
    char                 *data;
    const char           *name;
    runner_notify_msg_t  *msg;

    msg = calloc(1, sizeof(runner_notify_msg_t));

    if (msg == NULL || smcp_random_id_hex(delivery, 16) != SMCP_OK) {
        free(msg);
        return 0;
    }

    msg->id = id;
    now = smcp_now_ms();

    rc = runner_store_notify_claim(st, id, now, delivery, &msg->claim, word,
                                   sizeof(word));

    if (rc != RUNNER_OK) {
        if (rc == RUNNER_ERR) {
            runner_log("error", id, "notify: claiming an attempt: %s", word);

        } else if (strcmp(word, "gone") == 0) {
            runner_log("info", id, "notify: the run is gone (expired): "
                       "nothing sent");
        }

        free(msg);
        return 0;
    }

    /* the lease has it: a failure here is tried again after it */
    if (runner_store_notify_read(st, id, &msg->run) != RUNNER_OK) {
        runner_log("error", id, "notify: reading the run: %s",
                   runner_store_error(st));
        free(msg);
        return 1;
    }

    runner_log_tenant(smcp_valid_tenant(msg->run.tenant,
                                        strlen(msg->run.tenant))
                      ? msg->run.tenant : NULL);

    result = runner_notify_attempt(msg, &status, err, sizeof(err));

    if (result == RUNNER_NOTIFY_STOPPED) {
        runner_log("info", id, "notify: the runner stops: attempt %lld "
                   "is left to its lease", msg->claim.attempt);
        goto done;
    }

    next = -1;
    now = smcp_now_ms();

    if (result == RUNNER_NOTIFY_RETRYING) {
        first = (msg->claim.first > 0 && msg->claim.first <= now)
                ? msg->claim.first : now;

        if (now - first >= runner_config->notify_window * 1000LL) {
            result = RUNNER_NOTIFY_FAILED;

        } else {
            next = now + runner_notify_backoff(msg->claim.attempt) * 1000;
        }
    }

    name = runner_notify_results[result];
    data = runner_notify_event(msg, status, err, next, result);

    rc = data ? runner_store_notify_result(st, id, msg->claim.attempt, name,
                                           next, data, word, sizeof(word))
              : RUNNER_ERR;

    if (data == NULL) {
        snprintf(word, sizeof(word), "the event was not made (memory)");
    }

    free(data);

    if (rc != RUNNER_OK) {
        runner_log("error", id, "notify: storing attempt %lld's result: %s",
                   msg->claim.attempt, word);
    }

    runner_metrics_notify(name);

    runner_log(result == RUNNER_NOTIFY_DELIVERED ? "info" : "warn", id,
               "notify: attempt %lld to %s (%s): %s%s%s", msg->claim.attempt,
               msg->origin[0] ? msg->origin : "no valid url", msg->format
               ? msg->format : "-", name, err[0] ? ": " : "", err);

done:

    runner_log_tenant(NULL);
    free(msg->watch);
    free(msg);

    return 1;
}


static pthread_t  runner_notify_senders[RUNNER_NOTIFY_SENDERS];
static int        runner_notify_nsenders;


/* a sender: arg, its number, staggers its first look */
static void *
runner_notify_thread(void *arg)
{
    int              i, n, rc, said, claimed;
    int64_t          now, next;
    runner_store_t  *st;
    char             err[RUNNER_ERRLEN];
    char             ids[RUNNER_NOTIFY_BATCH][SMCP_ID_LEN + 1];

    st = NULL;
    next = smcp_now_ms() + (intptr_t) arg * RUNNER_NOTIFY_TICK_MS
                           / RUNNER_NOTIFY_SENDERS;
    said = 0;

    while (!atomic_load(&runner_stop)) {
        now = smcp_now_ms();

        if (now < next) {
            usleep(RUNNER_TICK_MS * 1000);
            continue;
        }

        next = now + RUNNER_NOTIFY_TICK_MS;

        if (runner_store_lost(st)) {
            runner_store_close(st);

            /* the main loop says when Redis is away */
            st = runner_store_connect(0, err, sizeof(err));

            if (st == NULL) {
                next = now + RUNNER_RECONNECT_MS;
                continue;
            }
        }

        rc = runner_store_notify_due(st, now, ids, RUNNER_NOTIFY_BATCH, &n);

        if (rc == RUNNER_ERR) {
            /* not a lost connection: said once, until it works again */
            if (!runner_store_lost(st) && !said) {
                runner_log("error", NULL, "notify: the runs due: %s",
                           runner_store_error(st));
                said = 1;
            }

            continue;
        }

        said = 0;

        claimed = 0;

        for (i = 0; i < n && !atomic_load(&runner_stop); i++) {
            claimed += runner_notify_one(st, ids[i]);
        }

        /* a full batch that went on: more may be due */
        if (rc == RUNNER_AGAIN && claimed) {
            next = now;
        }
    }

    runner_store_close(st);

    return NULL;
}


/* the senders started; RUNNER_ERR: none could be (err says why) */
int
runner_notify_start(char *err, size_t errlen)
{
    intptr_t  i;

    if (runner_config->notify_secret.len == 0) {
        runner_log("info", NULL, "completion notifications are sent "
                   "unsigned (no X-SMCP-Signature): no --notify-secret-file "
                   "or $SMCP_NOTIFY_SECRET");
    }

    for (i = 0; i < RUNNER_NOTIFY_SENDERS; i++) {
        if (pthread_create(&runner_notify_senders[i], NULL,
                           runner_notify_thread, (void *) i)
            != 0)
        {
            break;
        }

        runner_notify_nsenders++;
    }

    if (runner_notify_nsenders == 0) {
        snprintf(err, errlen, "cannot start a notify thread");
        return RUNNER_ERR;
    }

    if (runner_notify_nsenders < RUNNER_NOTIFY_SENDERS) {
        runner_log("warn", NULL, "notify: %d of %d sender threads started",
                   runner_notify_nsenders, RUNNER_NOTIFY_SENDERS);
    }

    return RUNNER_OK;
}


/* after runner_stop is set: the senders' ends waited for */
void
runner_notify_stop(void)
{
    int  i;

    for (i = 0; i < runner_notify_nsenders; i++) {
        pthread_join(runner_notify_senders[i], NULL);
    }

    runner_notify_nsenders = 0;
}
