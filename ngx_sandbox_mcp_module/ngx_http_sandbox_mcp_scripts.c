/*
 * Lua scripts run by Redis.  Keys are passed in KEYS (computed by the
 * module from the configured prefix); "another tenant's object" and "no
 * such object" give the same answer on purpose.
 */

#include "ngx_http_sandbox_mcp_scripts.h"


/*
 * The session scripts also check the token's id against the hash
 * `revoked` when the worker's copy of it is not up to date (jti not "").
 */
#define NGX_HTTP_SANDBOX_MCP_REVOKED_CHECK(jti)                               \
    "if ARGV[" jti "] ~= '' and\n"                                            \
    "   redis.call('HEXISTS', KEYS[2], ARGV[" jti "]) == 1 then\n"            \
    "  return redis.status_reply('REVOKED')\n"                                \
    "end\n"


/*
 * MCP session create.
 * KEYS: mcp:{sid}, revoked   ARGV: tenant, protocol, client name, client
 * version, now ms, ttl ms, jti or ""
 */
ngx_http_sandbox_mcp_script_t  ngx_http_sandbox_mcp_script_session_create = {
    "session_create",
    NGX_HTTP_SANDBOX_MCP_REVOKED_CHECK("7")
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"
    "redis.call('HSET', KEYS[1], 'tenant', ARGV[1], 'protocol', ARGV[2],\n"
    "  'client_name', ARGV[3], 'client_version', ARGV[4],\n"
    "  'created_at', ARGV[5])\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[6])\n"
    "return 1\n",
    ""
};


/*
 * MCP session lookup; refreshes its TTL.  Returns the negotiated protocol
 * version, or nil for an unknown session or one of another tenant.
 * KEYS: mcp:{sid}, revoked   ARGV: tenant, ttl ms, jti or ""
 */
ngx_http_sandbox_mcp_script_t  ngx_http_sandbox_mcp_script_session_touch = {
    "session_touch",
    NGX_HTTP_SANDBOX_MCP_REVOKED_CHECK("3")
    "local h = redis.call('HMGET', KEYS[1], 'tenant', 'protocol')\n"
    "if h[1] ~= ARGV[1] then return nil end\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "return h[2] or ''\n",
    ""
};


/*
 * MCP session delete.
 * KEYS: mcp:{sid}, revoked   ARGV: tenant, (unused), jti or ""
 */
ngx_http_sandbox_mcp_script_t  ngx_http_sandbox_mcp_script_session_delete = {
    "session_delete",
    NGX_HTTP_SANDBOX_MCP_REVOKED_CHECK("3")
    "if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[1] then return 0 end\n"
    "return redis.call('DEL', KEYS[1])\n",
    ""
};


/*
 * Run create: run hash, indexes, first event, queue entry, ping - at once.
 * Every check comes before the first write.  The run indexes lose entries
 * older than any run's keys can be (the trim score).
 * KEYS: run, run events, runs:{tenant}, session, session runs, queue,
 *       channel run:{id}, tenant:{tenant}:active, sessions
 * ARGV: run id, tenant, session id, new session (0/1), now ms, task,
 *       repository, branch, model, title, create_pr, timeout, events maxlen,
 *       run key prefix, max queued, max running, max cost (USD),
 *       retention (s), session idle ttl (s), session idle expiry (ms),
 *       trim score (ms)
 * Returns 1; 0 when an existing session is unknown to this tenant; -1 when
 * it expired (or is expiring); -2 when the tenant has max queued runs
 * started already.
 */
ngx_http_sandbox_mcp_script_t  ngx_http_sandbox_mcp_script_run_create = {
    "run_create",
    "if ARGV[4] == '1' then\n"
    "  if redis.call('EXISTS', KEYS[4]) == 1 then return 0 end\n"
    "else\n"
    "  local s = redis.call('HMGET', KEYS[4], 'tenant', 'state')\n"
    "  if s[1] ~= ARGV[2] then return 0 end\n"
    "  if s[2] == 'expiring' or s[2] == 'expired' then return -1 end\n"
    "end\n"
    "local started, gone = 0, {}\n"
    "for _, id in ipairs(redis.call('SMEMBERS', KEYS[8])) do\n"
    "  local s = redis.call('HGET', ARGV[14] .. id, 'status')\n"
    "  if s == 'started' then started = started + 1\n"
    "  elseif s ~= 'running' then gone[#gone + 1] = id end\n"
    "end\n"
    "if started >= tonumber(ARGV[15]) then return -2 end\n"
    "for _, id in ipairs(gone) do redis.call('SREM', KEYS[8], id) end\n"
    "if ARGV[4] == '1' then\n"
    "  redis.call('HSET', KEYS[4], 'tenant', ARGV[2], 'created_at', ARGV[5])\n"
    "end\n"
    "redis.call('HSET', KEYS[4], 'last_run', ARGV[1], 'last_active', ARGV[5],\n"
    "  'idle_ttl', ARGV[19], 'retention', ARGV[18])\n"
    "redis.call('ZADD', KEYS[9], ARGV[20], ARGV[3])\n"
    "redis.call('HSET', KEYS[1], 'tenant', ARGV[2], 'session', ARGV[3],\n"
    "  'task', ARGV[6], 'repository', ARGV[7], 'branch', ARGV[8],\n"
    "  'model', ARGV[9], 'title', ARGV[10], 'create_pr', ARGV[11],\n"
    "  'timeout', ARGV[12], 'status', 'started', 'created_at', ARGV[5],\n"
    "  'max_running', ARGV[16], 'max_cost', ARGV[17],\n"
    "  'retention', ARGV[18])\n"
    "redis.call('SADD', KEYS[8], ARGV[1])\n"
    "redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])\n"
    "redis.call('ZADD', KEYS[5], ARGV[5], ARGV[1])\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[21])\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', '(' .. ARGV[21])\n"
    "redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[13], '*',\n"
    "  'type', 'lifecycle', 'data', '{\"status\":\"started\"}',\n"
    "  'ts', ARGV[5])\n"
    "redis.call('XADD', KEYS[6], '*', 'run', ARGV[1])\n"
    "redis.call('PUBLISH', KEYS[7], 'started')\n"
    "return 1\n",
    ""
};


/*
 * Run list, newest first, resumable.
 * KEYS: runs zset (tenant's or session's), session hash or ""
 * ARGV: tenant, limit, cursor run id or "", cursor score, status or "",
 *       run key prefix, scan budget
 * Returns { next id or "", next score or "", {id, status, session, title,
 * created_at, finished_at}... }
 */
ngx_http_sandbox_mcp_script_t  ngx_http_sandbox_mcp_script_run_list = {
    "run_list",
    "if KEYS[2] ~= '' and\n"
    "   redis.call('HGET', KEYS[2], 'tenant') ~= ARGV[1] then\n"
    "  return {'', '', {}}\n"
    "end\n"
    "local limit = tonumber(ARGV[2])\n"
    "local budget = tonumber(ARGV[7])\n"
    "local pos = 0\n"
    "if ARGV[3] ~= '' then\n"
    "  local rank = redis.call('ZREVRANK', KEYS[1], ARGV[3])\n"
    "  if rank then pos = rank + 1 else\n"
    "    pos = redis.call('ZCOUNT', KEYS[1], '(' .. ARGV[4], '+inf')\n"
    "  end\n"
    "end\n"
    "local out, last, lastscore = {}, '', ''\n"
    "local total = redis.call('ZCARD', KEYS[1])\n"
    "while #out < limit and pos < total and budget > 0 do\n"
    "  local ids = redis.call('ZREVRANGE', KEYS[1], pos, pos + 99,\n"
    "                         'WITHSCORES')\n"
    "  if #ids == 0 then break end\n"
    "  for i = 1, #ids, 2 do\n"
    "    pos = pos + 1\n"
    "    budget = budget - 1\n"
    "    last, lastscore = ids[i], ids[i + 1]\n"
    "    local h = redis.call('HMGET', ARGV[6] .. ids[i], 'tenant',\n"
    "      'status', 'session', 'title', 'created_at', 'finished_at')\n"
    "    if h[1] == ARGV[1] and (ARGV[5] == '' or h[2] == ARGV[5]) then\n"
    "      out[#out + 1] = {ids[i], h[2] or '', h[3] or '', h[4] or '',\n"
    "                       h[5] or '', h[6] or ''}\n"
    "    end\n"
    "    if #out >= limit or budget <= 0 then break end\n"
    "  end\n"
    "end\n"
    "if pos >= total then last, lastscore = '', '' end\n"
    "return {last, lastscore, out}\n",
    ""
};


/*
 * Run cancel.  A run not yet started is cancelled at once: it leaves the
 * tenant's active set and its keys expire after its retention.  A running
 * one is flagged and the runners are told; a finished one is left alone.
 * KEYS: run, run events, channel run:{id}, channel cancel,
 *       tenant:{tenant}:active, run diff
 * ARGV: tenant, now ms, run id, events maxlen, retention (s) when the run
 *       has none
 * Returns the run hash (HGETALL), or nil.
 */
ngx_http_sandbox_mcp_script_t  ngx_http_sandbox_mcp_script_run_cancel = {
    "run_cancel",
    "local h = redis.call('HMGET', KEYS[1], 'tenant', 'status', 'retention')\n"
    "if h[1] ~= ARGV[1] then return nil end\n"
    "if h[2] == 'started' then\n"
    "  redis.call('HSET', KEYS[1], 'status', 'cancelled',\n"
    "    'finished_at', ARGV[2], 'error', 'cancelled before it started')\n"
    "  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*',\n"
    "    'type', 'lifecycle', 'data', '{\"status\":\"cancelled\"}',\n"
    "    'ts', ARGV[2])\n"
    "  redis.call('SREM', KEYS[5], ARGV[3])\n"
    "  local keep = tonumber(h[3]) or tonumber(ARGV[5])\n"
    "  for _, k in ipairs({KEYS[1], KEYS[2], KEYS[6]}) do\n"
    "    redis.call('EXPIRE', k, keep)\n"
    "  end\n"
    "  redis.call('PUBLISH', KEYS[3], 'cancelled')\n"
    "elseif h[2] == 'running' then\n"
    "  if redis.call('HSETNX', KEYS[1], 'cancel_requested', '1') == 1 then\n"
    "    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*',\n"
    "      'type', 'lifecycle', 'data', '{\"cancelRequested\":true}',\n"
    "      'ts', ARGV[2])\n"
    "  end\n"
    "  redis.call('PUBLISH', KEYS[4], ARGV[3])\n"
    "  redis.call('PUBLISH', KEYS[3], 'cancel')\n"
    "end\n"
    "return redis.call('HGETALL', KEYS[1])\n",
    ""
};


/*
 * Run diff: a page of the whole diff, or of one file's section.  The
 * section is found in the run's diff_index (path -> [offset, length],
 * written by the runner): only that page leaves Redis.  Without a usable
 * index the whole diff is sent for the module to scan, when it is at most
 * the scan limit.
 * KEYS: run, run diff
 * ARGV: tenant, offset (in the diff or the section), page size, path or "",
 *       scan limit
 * Returns {bytes, total (of the diff or the section), how}, how being
 * "range", "index", "whole" (bytes = the whole diff) or "noindex"; or nil.
 */
ngx_http_sandbox_mcp_script_t  ngx_http_sandbox_mcp_script_run_diff = {
    "run_diff",
    "local h = redis.call('HMGET', KEYS[1], 'tenant', 'diff_index')\n"
    "if h[1] ~= ARGV[1] then return nil end\n"
    "local off, page = tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local total = redis.call('STRLEN', KEYS[2])\n"
    "if ARGV[4] == '' then\n"
    "  return {redis.call('GETRANGE', KEYS[2], off, off + page - 1), total,\n"
    "          'range'}\n"
    "end\n"
    "local ok, idx = false, nil\n"
    "if h[2] then ok, idx = pcall(cjson.decode, h[2]) end\n"
    "if ok and type(idx) == 'table' then\n"
    "  local e = idx[ARGV[4]]\n"
    "  if e == nil then return {'', 0, 'index'} end\n"
    "  local s = type(e) == 'table' and tonumber(e[1])\n"
    "  local n = type(e) == 'table' and tonumber(e[2])\n"
    "  if s and n and s >= 0 and n >= 0 and s % 1 == 0 and n % 1 == 0\n"
    "     and s + n <= total then\n"
    "    if off >= n then return {'', n, 'index'} end\n"
    "    local last = math.min(s + n, s + off + page) - 1\n"
    "    return {redis.call('GETRANGE', KEYS[2], s + off, last), n, 'index'}\n"
    "  end\n"
    "end\n"
    "if total <= tonumber(ARGV[5]) then\n"
    "  return {redis.call('GET', KEYS[2]) or '', total, 'whole'}\n"
    "end\n"
    "return {'', total, 'noindex'}\n",
    ""
};


/*
 * Run events page.   KEYS: run, run events
 * ARGV: tenant, start id ("-" or "(id"), count
 * Returns the XRANGE reply, or nil.
 */
ngx_http_sandbox_mcp_script_t  ngx_http_sandbox_mcp_script_run_events = {
    "run_events",
    "if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[1] then return nil end\n"
    "return redis.call('XRANGE', KEYS[2], ARGV[2], '+', 'COUNT', ARGV[3])\n",
    ""
};


ngx_http_sandbox_mcp_script_t  *ngx_http_sandbox_mcp_scripts[] = {
    &ngx_http_sandbox_mcp_script_session_create,
    &ngx_http_sandbox_mcp_script_session_touch,
    &ngx_http_sandbox_mcp_script_session_delete,
    &ngx_http_sandbox_mcp_script_run_create,
    &ngx_http_sandbox_mcp_script_run_list,
    &ngx_http_sandbox_mcp_script_run_cancel,
    &ngx_http_sandbox_mcp_script_run_diff,
    &ngx_http_sandbox_mcp_script_run_events,
    NULL
};
