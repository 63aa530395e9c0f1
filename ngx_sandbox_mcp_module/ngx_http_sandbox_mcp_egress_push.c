/*
 * The writes a run may make, read from the request: git smart HTTP (its
 * service, and a push's command list: only the run's branch, never a
 * delete) and the pull request API (its head: the run's branch).
 */

#include "ngx_http_sandbox_mcp_egress_push.h"
#include "ngx_http_sandbox_mcp_egress_model.h"
#include "ngx_http_sandbox_mcp_egress_meter.h"
#include "ngx_http_sandbox_mcp_defaults.h"

#include "smcp_pktline.h"


/* no Content-Encoding, or identity: the body is what it says */
ngx_uint_t
ngx_http_sandbox_mcp_egress_identity(ngx_http_request_t *r)
{
    u_char           *p, *last;
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    for (part = &r->headers_in.headers.part; part; part = part->next) {
        h = part->elts;

        for (i = 0; i < part->nelts; i++) {

            if (h[i].key.len != sizeof("Content-Encoding") - 1
                || ngx_strncasecmp(h[i].key.data,
                                   (u_char *) "Content-Encoding",
                                   sizeof("Content-Encoding") - 1)
                   != 0)
            {
                continue;
            }

            p = h[i].value.data;
            last = p + h[i].value.len;

            while (p < last && (*p == ' ' || *p == '\t')) {
                p++;
            }

            while (last > p && (last[-1] == ' ' || last[-1] == '\t')) {
                last--;
            }

            if (last - p != sizeof("identity") - 1
                || ngx_strncasecmp(p, (u_char *) "identity",
                                   sizeof("identity") - 1)
                   != 0)
            {
                return 0;
            }
        }
    }

    return 1;
}


/*
 * What a request is, for the write rules of its location: git smart HTTP
 * (info/refs of a service, upload-pack, receive-pack) or the pull request
 * API.  NULL, or the refusal (*status) of a request no route carries.
 */
const char *
ngx_http_sandbox_mcp_egress_classify(ngx_http_request_t *r,
    ngx_uint_t push, ngx_uint_t *kind, ngx_uint_t *status)
{
    ngx_str_t  *uri;

    *kind = NGX_HTTP_SANDBOX_MCP_KIND_READ;
    *status = NGX_HTTP_FORBIDDEN;
    uri = &r->uri;

#define ngx_http_sandbox_mcp_ends_with(s)                                     \
    (uri->len >= sizeof(s) - 1                                                \
     && ngx_strncmp(uri->data + uri->len - (sizeof(s) - 1), s,                \
                    sizeof(s) - 1) == 0)

#define ngx_http_sandbox_mcp_args_are(s)                                      \
    (r->args.len == sizeof(s) - 1                                             \
     && ngx_strncmp(r->args.data, s, sizeof(s) - 1) == 0)

    switch (push) {

    case NGX_HTTP_SANDBOX_MCP_PUSH_GIT:

        if (ngx_http_sandbox_mcp_ends_with("/info/refs")) {

            if (ngx_http_sandbox_mcp_args_are("service=git-upload-pack")) {
                return NULL;
            }

            if (ngx_http_sandbox_mcp_args_are("service=git-receive-pack")) {
                *kind = NGX_HTTP_SANDBOX_MCP_KIND_ADVERTISE;
                return NULL;
            }

            return "egress: info/refs is served for ?service=git-upload-pack "
                   "or ?service=git-receive-pack only (smart HTTP)";
        }

        if (ngx_http_sandbox_mcp_ends_with("/git-upload-pack")) {
            return NULL;
        }

        if (ngx_http_sandbox_mcp_ends_with("/git-receive-pack")) {
            *kind = NGX_HTTP_SANDBOX_MCP_KIND_PUSH;
            break;
        }

        return "egress: only git smart HTTP is allowed";

    case NGX_HTTP_SANDBOX_MCP_PUSH_PULL_REQUEST:

        if (r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD)) {
            return NULL;
        }

        *kind = NGX_HTTP_SANDBOX_MCP_KIND_PULL_REQUEST;
        break;

    default:
        return NULL;
    }

#undef ngx_http_sandbox_mcp_ends_with
#undef ngx_http_sandbox_mcp_args_are

    if (r->method != NGX_HTTP_POST) {
        *status = NGX_HTTP_NOT_ALLOWED;
        return "egress: method not allowed here";
    }

    /* the body is checked as sent: no other coding than identity */
    if (!ngx_http_sandbox_mcp_egress_identity(r)) {
        *status = NGX_HTTP_UNSUPPORTED_MEDIA_TYPE;
        return "egress: pushes and pull requests are accepted without "
               "Content-Encoding only";
    }

    return NULL;
}


/*
 * The first bytes of the request body, in memory or in its temporary
 * file: up to size into buf.  Returns the bytes copied (*total: the whole
 * body's length) or NGX_ERROR.
 */
static ssize_t
ngx_http_sandbox_mcp_egress_body_head(ngx_http_request_t *r, u_char *buf,
    size_t size, off_t *total)
{
    off_t         len;
    size_t        n, want;
    ssize_t       got;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    n = 0;
    *total = 0;

    if (r->request_body == NULL) {
        return 0;
    }

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;
        len = b->in_file ? b->file_last - b->file_pos : b->last - b->pos;
        *total += len;

        want = (size_t) ngx_min((off_t) (size - n), len);

        if (want == 0) {
            continue;
        }

        if (b->in_file) {
            got = ngx_read_file(b->file, buf + n, want, b->file_pos);
            if (got != (ssize_t) want) {
                return NGX_ERROR;
            }

        } else {
            ngx_memcpy(buf + n, b->pos, want);
        }

        n += want;
    }

    return n;
}


/* the command list of a push: only the run's branch, never a delete */
static ngx_uint_t
ngx_http_sandbox_mcp_egress_check_push(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_egress_ctx_t *ctx, char *err, size_t errlen)
{
    u_char    *buf, *p;
    off_t      total;
    ssize_t    n;
    unsigned   ncommands;
    ngx_int_t  rc;
    u_char     ref[sizeof("refs/heads/" NGX_HTTP_SANDBOX_MCP_BRANCH_PREFIX)
                   + SMCP_ID_LEN];
    char       why[NGX_HTTP_SANDBOX_MCP_ERR_MAX];

    buf = ngx_pnalloc(r->pool, NGX_HTTP_SANDBOX_MCP_PUSH_HEAD);
    if (buf == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    n = ngx_http_sandbox_mcp_egress_body_head(r, buf,
                                           NGX_HTTP_SANDBOX_MCP_PUSH_HEAD,
                                           &total);
    if (n == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_cpymem(ref, "refs/heads/" NGX_HTTP_SANDBOX_MCP_BRANCH_PREFIX,
                   sizeof("refs/heads/" NGX_HTTP_SANDBOX_MCP_BRANCH_PREFIX)
                   - 1);
    p = ngx_cpymem(p, ctx->run_id.data, ctx->run_id.len);

    rc = smcp_pkt_check_push(buf, n, (char *) ref, p - ref, &ncommands,
                             why, sizeof(why));

    if (rc == SMCP_OK) {
        return NGX_OK;
    }

    if (rc == SMCP_PKT_MORE) {
        ngx_snprintf((u_char *) err, errlen, "egress: push refused: %s%Z",
                     total > n ? "its command list is too long"
                               : "malformed push: the command list does not "
                                 "end");
        return NGX_HTTP_BAD_REQUEST;
    }

    ngx_snprintf((u_char *) err, errlen, "egress: push refused: %s%Z", why);

    return (rc == SMCP_PKT_BAD) ? NGX_HTTP_BAD_REQUEST : NGX_HTTP_FORBIDDEN;
}


/*
 * A pull request: its head must be the run's branch, "opencode/<runId>"
 * or "<owner>:opencode/<runId>" with the repository's owner (a pick
 * run's: its attempt's, ctx->head); a run that asked for a draft opens a
 * draft ("draft": true).
 */
static ngx_uint_t
ngx_http_sandbox_mcp_egress_check_pull(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_egress_ctx_t *ctx, char *err, size_t errlen)
{
    u_char        *buf, *slash;
    off_t          total;
    size_t         len, olen, blen;
    json_t        *body, *head;
    ssize_t        n;
    const char    *h, *msg;
    json_error_t   jerr;

    buf = ngx_pnalloc(r->pool, NGX_HTTP_SANDBOX_MCP_PULL_REQUEST_MAX);
    if (buf == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    n = ngx_http_sandbox_mcp_egress_body_head(r, buf,
                                       NGX_HTTP_SANDBOX_MCP_PULL_REQUEST_MAX,
                                       &total);
    if (n == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (total > n) {
        ngx_snprintf((u_char *) err, errlen, "egress: a pull request body "
                     "is limited to %uz bytes%Z",
                     (size_t) NGX_HTTP_SANDBOX_MCP_PULL_REQUEST_MAX);
        return NGX_HTTP_REQUEST_ENTITY_TOO_LARGE;
    }

    body = json_loadb((char *) buf, n, JSON_REJECT_DUPLICATES, &jerr);

    if (!json_is_object(body)) {
        json_decref(body);
        ngx_snprintf((u_char *) err, errlen, "egress: a pull request body "
                     "must be one JSON object (without duplicate keys)%Z");
        return NGX_HTTP_BAD_REQUEST;
    }

    head = json_object_get(body, "head");
    h = json_string_value(head);
    len = json_string_length(head);

    blen = sizeof(NGX_HTTP_SANDBOX_MCP_BRANCH_PREFIX) - 1 + ctx->head.len;
    slash = ngx_strlchr(ctx->repository.data,
                        ctx->repository.data + ctx->repository.len, '/');
    olen = slash ? (size_t) (slash - ctx->repository.data) : 0;

    msg = NULL;

    if (json_object_get(body, "head_repo")) {
        msg = "egress: head_repo is refused: a pull request's head is the "
              "run's branch in the run's repository";

    } else if (h == NULL
               || !((len == blen)
                    || (olen && len == olen + 1 + blen && h[olen] == ':'
                        && ngx_strncasecmp((u_char *) h,
                                           ctx->repository.data, olen)
                           == 0)))
    {
        msg = "";

    } else {
        h += len - blen;

        if (ngx_strncmp(h, NGX_HTTP_SANDBOX_MCP_BRANCH_PREFIX,
                        sizeof(NGX_HTTP_SANDBOX_MCP_BRANCH_PREFIX) - 1)
            != 0
            || ngx_strncmp(h + sizeof(NGX_HTTP_SANDBOX_MCP_BRANCH_PREFIX) - 1,
                           ctx->head.data, ctx->head.len)
               != 0)
        {
            msg = "";
        }
    }

    if (msg == NULL && ctx->draft
        && !json_is_true(json_object_get(body, "draft")))
    {
        msg = "egress: this run asked for a draft pull request: its body "
              "must say \"draft\": true";
    }

    json_decref(body);

    if (msg == NULL) {
        return NGX_OK;
    }

    if (*msg) {
        ngx_snprintf((u_char *) err, errlen, "%s%Z", msg);

    } else {
        ngx_snprintf((u_char *) err, errlen, "egress: a pull request's head "
                     "must be the run's branch "
                     NGX_HTTP_SANDBOX_MCP_BRANCH_PREFIX "%V%Z", &ctx->head);
    }

    return NGX_HTTP_FORBIDDEN;
}


/* the body of a push, a pull request or a model request is read: it
 * decides (a capped run's model request once its hold is taken) */
void
ngx_http_sandbox_mcp_egress_body(ngx_http_request_t *r)
{
    char                                err[NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX];
    ngx_uint_t                          status;
    ngx_http_sandbox_mcp_egress_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_egress_module);

    if (ctx->kind == NGX_HTTP_SANDBOX_MCP_KIND_PUSH) {
        status = ngx_http_sandbox_mcp_egress_check_push(r, ctx, err,
                                                         sizeof(err));
    } else if (ctx->kind == NGX_HTTP_SANDBOX_MCP_KIND_PULL_REQUEST) {
        status = ngx_http_sandbox_mcp_egress_check_pull(r, ctx, err,
                                                         sizeof(err));
    } else {
        status = ngx_http_sandbox_mcp_egress_model(r, err, sizeof(err));
    }

    if (status == NGX_OK && ctx->worst > 0) {
        if (ngx_http_sandbox_mcp_egress_meter_hold(r, ctx,
                                            ngx_http_sandbox_mcp_egress_decided)
            == NGX_OK)
        {
            return;                 /* decided once Redis answers */
        }

        status = NGX_HTTP_SERVICE_UNAVAILABLE;
        ngx_cpystrn((u_char *) err,
                    (u_char *) NGX_HTTP_SANDBOX_MCP_EGRESS_UNREAD, sizeof(err));
    }

    ngx_http_sandbox_mcp_egress_decided(r, status, err);
}


/* granted (NGX_OK): on to the upstream; else the refusal, status and
 * err */
void
ngx_http_sandbox_mcp_egress_decided(ngx_http_request_t *r,
    ngx_uint_t status, const char *err)
{
    const char                         *type;
    ngx_int_t                           rc;
    ngx_table_elt_t                    *h;
    ngx_http_sandbox_mcp_egress_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_egress_module);

    ctx->done = 1;

    if (status == NGX_OK) {
        ctx->granted = 1;
        ctx->rc = NGX_OK;

        r->write_event_handler = ngx_http_core_run_phases;
        ngx_http_core_run_phases(r);
        return;
    }

    ctx->rc = NGX_DONE;

    if (status == NGX_HTTP_INTERNAL_SERVER_ERROR) {
        ngx_http_finalize_request(r, status);
        return;
    }

    type = (status == NGX_HTTP_FORBIDDEN) ? "permission_error"
           : (status == NGX_HTTP_TOO_MANY_REQUESTS) ? "rate_limit_error"
           : (status == NGX_HTTP_SANDBOX_MCP_PAYMENT_REQUIRED)
             ? "billing_error"
           : (status == NGX_HTTP_SERVICE_UNAVAILABLE) ? "api_error"
           : "invalid_request_error";

    if (status == NGX_HTTP_TOO_MANY_REQUESTS) {
        /* the hold of a capped run's requests (egress_hold.c) */
        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        h->hash = 1;
        ngx_str_set(&h->key, "Retry-After");
        ngx_str_set(&h->value, "2");
    }

    rc = ngx_http_sandbox_mcp_egress_refuse(r, status, type, err);
    ngx_http_finalize_request(r, rc);
}
