/*
 * The egress meter.  A model request the egress let through has its
 * answer read as it streams back to the sandbox (a header and a body
 * filter, on top of the chain: before chunked encoding or any
 * compression; the bytes are never changed or held), by smcp_usage.  At
 * the log phase its tokens are priced by the model the request named
 * (sandbox_mcp_egress_price) and added to the run's metered totals
 * (run_meter.lua); the audit record says them.  A model request of a run
 * whose metered cost has reached its maxCostUsd is refused (402) before
 * anything goes upstream, and the runner stops the sandbox; while a
 * capped run's requests go, each holds the most it could cost
 * (egress_hold.c), and one that would pass the cap with the others waits
 * (429).
 *
 * What the agent reports plays no part: the counts are the provider's.
 * An answer that says no usage (a stream asked without it, a body the
 * meter cannot read) counts its bytes instead (SMCP_USAGE_BYTES_PER_TOKEN),
 * as does the part of an answer cut short before its last usage, and a
 * request the provider took but never answered (the sandbox gave up
 * first).  Whether a request is metered is the provider's answer's (2xx),
 * never the status nginx sent the sandbox.
 */

#include "ngx_http_sandbox_mcp_egress_meter.h"
#include "ngx_http_sandbox_mcp_egress_hold.h"
#include "ngx_http_sandbox_mcp_defaults.h"
#include "ngx_http_sandbox_mcp_redis.h"
#include "ngx_http_sandbox_mcp_scripts.h"


/* a price's digits after the point, at most */
#define NGX_HTTP_SANDBOX_MCP_PRICE_POINT  6

/* US dollars of the run hash, at most (said with %.6f) */
#define NGX_HTTP_SANDBOX_MCP_USD_MAX      1e12

/* the answer's tokens a request that gives no bound is held for: the
 * most of the models' own (OpenAI's and Gemini's default to theirs) */
#define NGX_HTTP_SANDBOX_MCP_HOLD_OUTPUT  128000


typedef struct {
    ngx_str_t            model;         /* exact, "prefix*" or "*" */
    smcp_usage_price_t   price;
} ngx_http_sandbox_mcp_egress_price_t;


typedef struct {
    ngx_shm_zone_t      *hold;          /* the holds (egress_hold.c) */
} ngx_http_sandbox_mcp_meter_main_conf_t;


static void *ngx_http_sandbox_mcp_meter_create_main_conf(ngx_conf_t *cf);
static ngx_int_t ngx_http_sandbox_mcp_meter_init(ngx_conf_t *cf);
static ngx_http_sandbox_mcp_egress_price_t *
    ngx_http_sandbox_mcp_egress_meter_price(
    ngx_http_sandbox_mcp_egress_ctx_t *ctx);
static ngx_http_module_t  ngx_http_sandbox_mcp_meter_module_ctx = {
    NULL,                                  /* preconfiguration */
    ngx_http_sandbox_mcp_meter_init,       /* postconfiguration */

    ngx_http_sandbox_mcp_meter_create_main_conf,
                                           /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    NULL,                                  /* create location configuration */
    NULL                                   /* merge location configuration */
};


/*
 * A module of its own: the filters must sit on top of the chain.  A
 * dynamic build loads it after every filter of nginx; a static build
 * lists it among the auxiliary filters (config).
 */
ngx_module_t  ngx_http_sandbox_mcp_meter_module = {
    NGX_MODULE_V1,
    &ngx_http_sandbox_mcp_meter_module_ctx, /* module context */
    NULL,                                  /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;


/* the request's context, when its answer is metered */
static ngx_http_sandbox_mcp_egress_ctx_t *
ngx_http_sandbox_mcp_meter_ctx(ngx_http_request_t *r)
{
    ngx_http_sandbox_mcp_egress_ctx_t  *ctx;

    if (r != r->main) {
        return NULL;
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_sandbox_mcp_egress_module);

    return (ctx && ctx->usage && ctx->granted) ? ctx : NULL;
}


static ngx_int_t
ngx_http_sandbox_mcp_meter_header_filter(ngx_http_request_t *r)
{
    ngx_table_elt_t                    *enc;
    ngx_http_sandbox_mcp_egress_ctx_t  *ctx;

    ctx = ngx_http_sandbox_mcp_meter_ctx(r);

    if (ctx) {
        enc = r->headers_out.content_encoding;

        /* compressed (the routes ask for none): its bytes only */
        if (enc && enc->hash
            && !(enc->value.len == sizeof("identity") - 1
                 && ngx_strncasecmp(enc->value.data, (u_char *) "identity",
                                    enc->value.len)
                    == 0))
        {
            ctx->opaque = 1;
        }
    }

    return ngx_http_next_header_filter(r);
}


static ngx_int_t
ngx_http_sandbox_mcp_meter_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in)
{
    off_t                               n;
    ngx_buf_t                          *b;
    ngx_chain_t                        *cl;
    ngx_http_sandbox_mcp_egress_ctx_t  *ctx;

    ctx = ngx_http_sandbox_mcp_meter_ctx(r);

    for (cl = ctx ? in : NULL; cl; cl = cl->next) {
        b = cl->buf;

        if (ngx_buf_in_memory(b)) {
            n = b->last - b->pos;

            if (!ctx->opaque) {
                smcp_usage_feed(ctx->usage, b->pos, (size_t) n);
            }

            ctx->answer_bytes += n;

        } else if (b->in_file) {
            ctx->answer_bytes += b->file_last - b->file_pos;
            ctx->opaque = 1;
        }

        if (b->last_buf) {
            ctx->answered = 1;
        }
    }

    return ngx_http_next_body_filter(r, in);
}


static void *
ngx_http_sandbox_mcp_meter_create_main_conf(ngx_conf_t *cf)
{
    return ngx_pcalloc(cf->pool,
                       sizeof(ngx_http_sandbox_mcp_meter_main_conf_t));
}


static ngx_int_t
ngx_http_sandbox_mcp_meter_init(ngx_conf_t *cf)
{
    ngx_http_sandbox_mcp_meter_main_conf_t  *mcf;

    mcf = ngx_http_conf_get_module_main_conf(cf,
                                            ngx_http_sandbox_mcp_meter_module);

    mcf->hold = ngx_http_sandbox_mcp_egress_hold_zone(cf,
                                            &ngx_http_sandbox_mcp_meter_module);
    if (mcf->hold == NULL) {
        return NGX_ERROR;
    }

    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_sandbox_mcp_meter_header_filter;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_sandbox_mcp_meter_body_filter;

    return NGX_OK;
}


/* a price's model: what a model name is made of, "*" last or alone */
static ngx_uint_t
ngx_http_sandbox_mcp_egress_price_model(ngx_str_t *s)
{
    u_char  *p, *last;

    if (s->len == 0 || s->len >= SMCP_USAGE_MODEL) {
        return 0;
    }

    last = s->data + s->len;

    if (last[-1] == '*') {
        last--;
    }

    for (p = s->data; p < last; p++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')
              || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'
              || *p == '.' || *p == ':' || *p == '/' || *p == '@'))
        {
            return 0;
        }
    }

    return 1;
}


char *
ngx_http_sandbox_mcp_egress_price(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_sandbox_mcp_egress_loc_conf_t *lcf = conf;

    double                                *usd[4];
    ngx_int_t                              n;
    ngx_str_t                             *value;
    ngx_uint_t                             i;
    ngx_http_sandbox_mcp_egress_price_t   *p, *have;

    value = cf->args->elts;

    if (!ngx_http_sandbox_mcp_egress_price_model(&value[1])) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "\"%V\": a model name "
                           "(letters, digits, \"-_.:/@\"), a prefix ending "
                           "in \"*\", or \"*\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    if (lcf->prices == NGX_CONF_UNSET_PTR) {
        lcf->prices = ngx_array_create(cf->pool, 4,
                               sizeof(ngx_http_sandbox_mcp_egress_price_t));
        if (lcf->prices == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    have = lcf->prices->elts;

    for (i = 0; i < lcf->prices->nelts; i++) {
        if (have[i].model.len == value[1].len
            && ngx_strncmp(have[i].model.data, value[1].data, value[1].len)
               == 0)
        {
            return "names a model twice";
        }
    }

    p = ngx_array_push(lcf->prices);
    if (p == NULL) {
        return NGX_CONF_ERROR;
    }

    p->model = value[1];

    usd[0] = &p->price.input;
    usd[1] = &p->price.output;
    usd[2] = &p->price.cache_read;
    usd[3] = &p->price.cache_write;

    for (i = 2; i < cf->args->nelts; i++) {
        n = ngx_atofp(value[i].data, value[i].len,
                      NGX_HTTP_SANDBOX_MCP_PRICE_POINT);

        if (n == NGX_ERROR) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "\"%V\": a price is US "
                               "dollars per million tokens, a number with "
                               "at most %d decimals (3, 0.3, 3.75)",
                               &value[i], NGX_HTTP_SANDBOX_MCP_PRICE_POINT);
            return NGX_CONF_ERROR;
        }

        *usd[i - 2] = (double) n / 1e6;
    }

    /* the cache's prices, unsaid: the input's (never under the bill) */
    if (cf->args->nelts < 5) {
        p->price.cache_read = p->price.input;
    }

    if (cf->args->nelts < 6) {
        p->price.cache_write = p->price.input;
    }

    return NGX_CONF_OK;
}


/* Gemini names the model in the path: .../models/NAME:generateContent */
static void
ngx_http_sandbox_mcp_egress_meter_path_model(ngx_http_request_t *r,
    ngx_str_t *model)
{
    u_char  *p, *last, *colon;

    last = r->uri.data + r->uri.len;

    for (p = last; p > r->uri.data; p--) {
        if (last - p > 8 && ngx_strncmp(p, "/models/", 8) == 0) {
            break;
        }
    }

    if (p == r->uri.data) {
        return;
    }

    p += 8;
    colon = ngx_strlchr(p, last, ':');

    if (colon && colon - p < SMCP_USAGE_MODEL) {
        model->data = p;
        model->len = colon - p;
    }
}


/*
 * The most a capped run's request could cost: its bytes as input tokens
 * (a token is a byte at least) at the dearer of the input and cache write
 * prices, and its bound on the answer's tokens
 * (NGX_HTTP_SANDBOX_MCP_HOLD_OUTPUT when it gives none) times the answers
 * it asks for, at the output price: ctx->worst, which it holds while it
 * goes (ngx_http_sandbox_mcp_egress_meter_hold)
 */
static void
ngx_http_sandbox_mcp_egress_meter_worst(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_egress_ctx_t *ctx, smcp_usage_t *request)
{
    int64_t                               out;
    smcp_usage_price_t                   *p;
    ngx_http_sandbox_mcp_egress_price_t  *price;

    price = ngx_http_sandbox_mcp_egress_meter_price(ctx);
    if (price == NULL) {
        return;
    }

    p = &price->price;
    out = request->max_output ? request->max_output
                              : NGX_HTTP_SANDBOX_MCP_HOLD_OUTPUT;

    ctx->worst = ((double) r->request_length
                  * ngx_max(p->input, p->cache_write)
                  + (double) out * ngx_max(request->choices, 1) * p->output)
                 / 1e6;
}


/* the hold taken, against the run's cost as Redis has it now (the body
 * may have come slowly): NGX_OK; or the refusal's status, err set */
static ngx_uint_t
ngx_http_sandbox_mcp_egress_meter_take(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_egress_ctx_t *ctx, char *err, size_t errlen)
{
    double                                   held, left, worst;
    ngx_int_t                                rc;
    ngx_uint_t                               n;
    ngx_http_sandbox_mcp_meter_main_conf_t  *mcf;

    worst = ctx->worst;

    if (!ctx->capped) {
        ctx->worst = 0;                     /* its cap lifted meanwhile */
        return NGX_OK;
    }

    left = ctx->cap - ctx->spent;
    mcf = ngx_http_get_module_main_conf(r, ngx_http_sandbox_mcp_meter_module);

    rc = ngx_http_sandbox_mcp_egress_hold(r, mcf->hold, &ctx->run_id,
                                          ctx->worst, left, &held, &n);

    if (rc == NGX_OK) {
        return NGX_OK;
    }

    ctx->worst = 0;

    if (rc != NGX_BUSY) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_snprintf((u_char *) err, errlen, "egress: the run's %ui model "
                 "requests in flight could cost up to $%.6f, and this one "
                 "up to $%.6f: more than the $%.6f the run has left under "
                 "its spend cap (maxCostUsd); it waits until they end "
                 "(retry)%Z", n, held, worst, left);

    return NGX_HTTP_TOO_MANY_REQUESTS;
}


/* HMGET run max_cost metered_cost: the run's cost now, then the hold */
static void
ngx_http_sandbox_mcp_egress_meter_held(void *data, redisReply *reply)
{
    ngx_http_sandbox_mcp_egress_ctx_t *ctx = data;

    char                 err[NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX];
    ngx_uint_t           status;
    const char          *msg;
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ctx->request;
    c = r->connection;
    ctx->cmd = NULL;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 2)
    {
        ctx->worst = 0;
        ctx->decided(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                     NGX_HTTP_SANDBOX_MCP_EGRESS_UNREAD);

    } else {
        msg = ngx_http_sandbox_mcp_egress_meter_check(r, ctx,
                                                      reply->element[0],
                                                      reply->element[1]);
        if (msg) {
            ctx->worst = 0;
            ctx->decided(r, NGX_HTTP_SANDBOX_MCP_PAYMENT_REQUIRED, msg);

        } else {
            status = ngx_http_sandbox_mcp_egress_meter_take(r, ctx, err,
                                                            sizeof(err));
            ctx->decided(r, status, err);
        }
    }

    ngx_http_run_posted_requests(c);
}


ngx_int_t
ngx_http_sandbox_mcp_egress_meter_hold(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_egress_ctx_t *ctx,
    ngx_http_sandbox_mcp_egress_decided_pt decided)
{
    ngx_str_t  argv[4];

    ngx_str_set(&argv[0], "HMGET");
    ngx_str_set(&argv[2], "max_cost");
    ngx_str_set(&argv[3], "metered_cost");

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &argv[1], SMCP_KEY_RUN,
                                       &ctx->run_id)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    ctx->decided = decided;
    ctx->cmd = ngx_http_sandbox_mcp_redis_command(
                   ngx_http_sandbox_mcp_egress_meter_held, ctx, 4, argv);

    return ctx->cmd ? NGX_OK : NGX_ERROR;
}


ngx_uint_t
ngx_http_sandbox_mcp_egress_meter_begin(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_egress_ctx_t *ctx, smcp_usage_t *request,
    ngx_uint_t path_model, char *err, size_t errlen)
{
    size_t                                   n;
    ngx_http_sandbox_mcp_egress_loc_conf_t  *lcf;

    n = ngx_strlen(request->model);

    /* Gemini bills the model of the path, whatever the body says */
    if (path_model) {
        ngx_http_sandbox_mcp_egress_meter_path_model(r, &ctx->model);

    } else if (n) {
        ctx->model.data = ngx_pnalloc(r->pool, n);
        if (ctx->model.data == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_memcpy(ctx->model.data, request->model, n);
        ctx->model.len = n;
    }

    lcf = ctx->lcf;

    /* a cap held against the prices: a model none covers would slip by */
    if (ctx->capped && lcf->prices
        && ngx_http_sandbox_mcp_egress_meter_price(ctx) == NULL)
    {
        ngx_snprintf((u_char *) err, errlen, "egress: %V: the run has a "
                     "spend cap (maxCostUsd) and the model \"%V\" has no "
                     "price here (sandbox_mcp_egress_price, make up and "
                     "compose: SMCP_EGRESS_PRICES): name a priced model%Z",
                     &lcf->route, &ctx->model);
        return NGX_HTTP_FORBIDDEN;
    }

    /* a background response answers at once without its usage: the
     * provider generates, and bills, where the meter cannot see */
    if (ctx->capped && lcf->prices && request->background) {
        ngx_snprintf((u_char *) err, errlen, "egress: %V: the run has a "
                     "spend cap (maxCostUsd) and the request asks for a "
                     "background response (\"background\": true), whose "
                     "usage the egress cannot meter: ask without it%Z",
                     &lcf->route);
        return NGX_HTTP_FORBIDDEN;
    }

    /* its hold is taken once the run's cost is read again */
    if (ctx->capped && lcf->prices) {
        ngx_http_sandbox_mcp_egress_meter_worst(r, ctx, request);
    }

    /* the same memory reads the answer */
    smcp_usage_init(request);
    ctx->usage = request;

    return NGX_OK;
}


/* a number of the run hash, 0 when there is none; a larger one than
 * NGX_HTTP_SANDBOX_MCP_USD_MAX is that (a cost so large is spent, never
 * none) */
static double
ngx_http_sandbox_mcp_egress_meter_number(redisReply *v)
{
    char    *end;
    double   d;

    if (v->type != REDIS_REPLY_STRING || v->len == 0) {
        return 0;
    }

    d = strtod(v->str, &end);

    if (*end != '\0' || !(d > 0)) {
        return 0;
    }

    return ngx_min(d, NGX_HTTP_SANDBOX_MCP_USD_MAX);
}


const char *
ngx_http_sandbox_mcp_egress_meter_check(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_egress_ctx_t *ctx, redisReply *max,
    redisReply *metered)
{
    u_char  *msg, *last;
    double   cap, spent;

    cap = ngx_http_sandbox_mcp_egress_meter_number(max);
    spent = ngx_http_sandbox_mcp_egress_meter_number(metered);
    ctx->capped = (cap > 0);
    ctx->cap = cap;
    ctx->spent = spent;

    if (cap == 0 || spent < cap) {
        return NULL;
    }

    msg = ngx_pnalloc(r->pool, NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX);
    if (msg == NULL) {
        return "egress: the run has spent its maxCostUsd";
    }

    last = ngx_snprintf(msg, NGX_HTTP_SANDBOX_MCP_MESSAGE_MAX - 1,
                        "egress: spend cap reached: the run's model requests "
                        "have cost $%.6f as metered at the egress, its "
                        "maxCostUsd is $%.6f; no more model requests",
                        spent, cap);
    *last = '\0';

    return (const char *) msg;
}


/*
 * Did the provider take the request, and may it bill it?  Its answer's
 * status says (2xx), whatever nginx sent the sandbox after; with no
 * answer (the sandbox went away before it, or the upstream failed), the
 * whole request reaching it does: the provider may be generating, and
 * billing, all the same.
 */
static ngx_uint_t
ngx_http_sandbox_mcp_egress_meter_billed(ngx_http_request_t *r)
{
    ngx_uint_t            status;
    ngx_http_upstream_t  *up;

    up = r->upstream;

    if (up == NULL) {
        return 0;
    }

    status = up->headers_in.status_n;

    if (status) {
        return status >= 200 && status < 300;
    }

    return up->request_body_sent;
}


/* the first price of the route whose model matches the request's, or
 * NULL */
static ngx_http_sandbox_mcp_egress_price_t *
ngx_http_sandbox_mcp_egress_meter_price(ngx_http_sandbox_mcp_egress_ctx_t *ctx)
{
    ngx_uint_t                               i;
    ngx_http_sandbox_mcp_egress_price_t     *p;
    ngx_http_sandbox_mcp_egress_loc_conf_t  *lcf;

    lcf = ctx->lcf;

    if (lcf->prices == NULL) {
        return NULL;
    }

    p = lcf->prices->elts;

    for (i = 0; i < lcf->prices->nelts; i++) {
        if (smcp_usage_model_matches((char *) p[i].model.data,
                                     p[i].model.len,
                                     (char *) ctx->model.data,
                                     ctx->model.len))
        {
            return &p[i];
        }
    }

    return NULL;
}


/* the request's usage, priced by its route's prices, into the audit
 * record (ev, when there is one) and the run's totals, once */
void
ngx_http_sandbox_mcp_egress_meter_log(ngx_http_request_t *r,
    ngx_http_sandbox_mcp_egress_ctx_t *ctx, json_t *ev)
{
    u_char                               cost_text[NGX_INT64_LEN + 16];
    double                               cost;
    json_t                              *usage;
    ngx_str_t                            argv[8];
    ngx_uint_t                           estimated;
    smcp_usage_t                        *u;
    ngx_http_sandbox_mcp_egress_price_t *price;

    u = ctx->usage;

    if (u == NULL || !ctx->granted
        || !ngx_http_sandbox_mcp_egress_meter_billed(r))
    {
        return;
    }

    ctx->usage = NULL;

    estimated = 0;

    if (ctx->opaque || u->objects == 0 || u->input + u->output == 0) {
        /* nothing said the usage (or only zeros: not the provider's) */
        smcp_usage_estimate(u, r->request_length, ctx->answer_bytes);
        estimated = 1;

    } else if (!ctx->answered) {
        /* cut short: its last usage may never have come */
        smcp_usage_estimate(u, 0, ctx->answer_bytes);
        estimated = 1;
    }

    price = ngx_http_sandbox_mcp_egress_meter_price(ctx);
    cost = price ? smcp_usage_cost(u, &price->price) : 0;

    /* a capped run's answer not seen to its end costs what it held: the
     * provider may generate, and bill, all of it (a sandbox that closes
     * each request once sent would otherwise never reach its cap) */
    if (!ctx->answered && ctx->worst > cost) {
        cost = ctx->worst;
        estimated = 1;
    }

    usage = json_pack("{s:I, s:I, s:I, s:I, s:f, s:b, s:b}",
                      "input", (json_int_t) u->input,
                      "output", (json_int_t) u->output,
                      "cacheRead", (json_int_t) u->cache_read,
                      "cacheWrite", (json_int_t) u->cache_write,
                      "costUsd", cost,
                      "priced", price != NULL,
                      "estimated", (int) estimated);

    if (usage && ctx->model.len) {
        json_object_set_new(usage, "model",
                            json_stringn((char *) ctx->model.data,
                                         ctx->model.len));
    }

    if (ev && usage) {
        json_object_set(ev, "usage", usage);
    }

    json_decref(usage);

    if (ngx_http_sandbox_mcp_redis_key(r->pool, &argv[0], SMCP_KEY_RUN,
                                       &ctx->run_id)
        != NGX_OK)
    {
        return;
    }

    argv[1] = ctx->tenant;
    argv[2] = ngx_http_sandbox_mcp_redis_number(r->pool, u->input);
    argv[3] = ngx_http_sandbox_mcp_redis_number(r->pool, u->output);
    argv[4] = ngx_http_sandbox_mcp_redis_number(r->pool, u->cache_read);
    argv[5] = ngx_http_sandbox_mcp_redis_number(r->pool, u->cache_write);

    argv[6].data = cost_text;
    argv[6].len = ngx_sprintf(cost_text, "%.9f", cost) - cost_text;

    if (price) {
        ngx_str_set(&argv[7], "0");

    } else {
        ngx_str_set(&argv[7], "1");
    }

    /* fire and forget, like the audit record: nothing waits */
    (void) ngx_http_sandbox_mcp_redis_script(
               &ngx_http_sandbox_mcp_script_run_meter, NULL, NULL, 1, 8,
               argv);
}
