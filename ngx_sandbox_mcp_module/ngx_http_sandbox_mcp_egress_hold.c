/*
 * The holds of capped runs' model requests in flight.  The meter adds a
 * request's cost to the run once it ended, and refuses a request of a run
 * whose metered cost reached its cap: every request in flight when the
 * cap is crossed would go past it.  So each model request of a capped run
 * holds the most it could cost while it goes (the meter says how much,
 * ngx_http_sandbox_mcp_egress_meter_begin), and a run with requests in
 * flight may start another only while what they hold and what it would
 * hold fit under what the run has left.  A run with none in flight may
 * always start one: a run goes past its cap by about one request (as far
 * as the bytes of a request bound its input tokens).
 *
 * The holds live in a shared memory zone of the workers (a red-black tree
 * by run id, as limit_conn's), kept across reloads; a request's pool
 * cleanup gives its hold back, however it ended (the holds of a worker
 * that dies with requests in flight stay until nginx restarts, as
 * limit_conn's counts do).  Per nginx: the egress replicas of one
 * deployment each hold their own.
 */

#include "ngx_http_sandbox_mcp_egress_hold.h"


#define NGX_HTTP_SANDBOX_MCP_HOLD_ZONE  (1024 * 1024)


typedef struct {
    ngx_rbtree_t                 rbtree;
    ngx_rbtree_node_t            sentinel;
} ngx_http_sandbox_mcp_hold_sh_t;


typedef struct {
    ngx_http_sandbox_mcp_hold_sh_t  *sh;
    ngx_slab_pool_t                 *shpool;
} ngx_http_sandbox_mcp_hold_ctx_t;


/* a run's holds; its id follows */
typedef struct {
    ngx_str_node_t               sn;
    ngx_uint_t                   n;         /* requests in flight */
    double                       held;      /* US dollars */
    u_char                       data[1];
} ngx_http_sandbox_mcp_hold_node_t;


/* a request's hold, for its pool's cleanup */
typedef struct {
    ngx_http_sandbox_mcp_hold_ctx_t   *ctx;
    ngx_http_sandbox_mcp_hold_node_t  *node;
    double                             worst;
} ngx_http_sandbox_mcp_hold_t;


static ngx_int_t
ngx_http_sandbox_mcp_hold_init(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_sandbox_mcp_hold_ctx_t  *octx = data;

    ngx_http_sandbox_mcp_hold_ctx_t  *ctx;

    ctx = shm_zone->data;

    if (octx) {
        /* a reload: the holds of the requests still going are kept */
        ctx->sh = octx->sh;
        ctx->shpool = octx->shpool;
        return NGX_OK;
    }

    ctx->shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (shm_zone->shm.exists) {
        ctx->sh = ctx->shpool->data;
        return NGX_OK;
    }

    ctx->sh = ngx_slab_alloc(ctx->shpool,
                             sizeof(ngx_http_sandbox_mcp_hold_sh_t));
    if (ctx->sh == NULL) {
        return NGX_ERROR;
    }

    ctx->shpool->data = ctx->sh;

    ngx_rbtree_init(&ctx->sh->rbtree, &ctx->sh->sentinel,
                    ngx_str_rbtree_insert_value);

    ctx->shpool->log_nomem = 0;

    return NGX_OK;
}


ngx_shm_zone_t *
ngx_http_sandbox_mcp_egress_hold_zone(ngx_conf_t *cf, void *tag)
{
    ngx_shm_zone_t                   *shm;
    ngx_http_sandbox_mcp_hold_ctx_t  *ctx;

    static ngx_str_t  name = ngx_string("sandbox_mcp_hold");

    shm = ngx_shared_memory_add(cf, &name, NGX_HTTP_SANDBOX_MCP_HOLD_ZONE,
                                tag);
    if (shm == NULL) {
        return NULL;
    }

    if (shm->data == NULL) {
        ctx = ngx_pcalloc(cf->pool, sizeof(ngx_http_sandbox_mcp_hold_ctx_t));
        if (ctx == NULL) {
            return NULL;
        }

        shm->init = ngx_http_sandbox_mcp_hold_init;
        shm->data = ctx;
    }

    return shm;
}


static void
ngx_http_sandbox_mcp_hold_release(void *data)
{
    ngx_http_sandbox_mcp_hold_t *h = data;

    ngx_http_sandbox_mcp_hold_node_t  *node;

    node = h->node;


    ngx_shmtx_lock(&h->ctx->shpool->mutex);

    if (--node->n == 0) {
        ngx_rbtree_delete(&h->ctx->sh->rbtree, &node->sn.node);
        ngx_slab_free_locked(h->ctx->shpool, node);

    } else {
        node->held -= h->worst;

        if (node->held < 0) {
            node->held = 0;
        }
    }

    ngx_shmtx_unlock(&h->ctx->shpool->mutex);
}


ngx_int_t
ngx_http_sandbox_mcp_egress_hold(ngx_http_request_t *r, ngx_shm_zone_t *zone,
    ngx_str_t *run, double worst, double left, double *held, ngx_uint_t *n)
{
    uint32_t                           hash;
    ngx_pool_cleanup_t                *cln;
    ngx_http_sandbox_mcp_hold_t       *h;
    ngx_http_sandbox_mcp_hold_ctx_t   *ctx;
    ngx_http_sandbox_mcp_hold_node_t  *node;

    ctx = zone->data;

    cln = ngx_pool_cleanup_add(r->pool, sizeof(ngx_http_sandbox_mcp_hold_t));
    if (cln == NULL) {
        return NGX_ERROR;
    }

    hash = ngx_crc32_short(run->data, run->len);

    ngx_shmtx_lock(&ctx->shpool->mutex);

    node = (ngx_http_sandbox_mcp_hold_node_t *)
               ngx_str_rbtree_lookup(&ctx->sh->rbtree, run, hash);


    if (node && node->held + worst > left) {
        *held = node->held;
        *n = node->n;
        ngx_shmtx_unlock(&ctx->shpool->mutex);
        return NGX_BUSY;
    }

    if (node == NULL) {
        node = ngx_slab_alloc_locked(ctx->shpool,
                   offsetof(ngx_http_sandbox_mcp_hold_node_t, data)
                   + run->len);

        if (node == NULL) {
            /* the zone is full: as if the run had one in flight */
            ngx_shmtx_unlock(&ctx->shpool->mutex);
            ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                          "sandbox_mcp egress: the holds' zone is full");
            *held = 0;
            *n = 0;
            return NGX_BUSY;
        }

        ngx_memcpy(node->data, run->data, run->len);
        node->sn.str.data = node->data;
        node->sn.str.len = run->len;
        node->sn.node.key = hash;
        node->n = 0;
        node->held = 0;

        ngx_rbtree_insert(&ctx->sh->rbtree, &node->sn.node);
    }

    node->n++;
    node->held += worst;

    ngx_shmtx_unlock(&ctx->shpool->mutex);

    h = cln->data;
    h->ctx = ctx;
    h->node = node;
    h->worst = worst;
    cln->handler = ngx_http_sandbox_mcp_hold_release;

    return NGX_OK;
}
