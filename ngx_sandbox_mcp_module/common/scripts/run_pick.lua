-- The attempt picked (opencode_pick_attempt): a run of a group of
-- attempts whose branch was pushed without a pull request (pr_status
-- `pushed`) gets one: a new run queued in its session, `pr_of` the
-- attempt, which the runner takes without a sandbox and which opens the
-- pull request of the attempt's branch opencode/<attempt's run id>.  One
-- pick per group.
--
-- KEYS[1] run:{group} (its first attempt)   KEYS[2] run:{attempt}
-- KEYS[3] run:{new}   KEYS[4] run:{new}:events   KEYS[5] session:{sid}
-- KEYS[6] session:{sid}:runs   KEYS[7] session:{sid}:active
-- KEYS[8] tenant:{tenant}:started   KEYS[9] runs:{tenant}   KEYS[10] queue
-- KEYS[11] channel tenant:{tenant}   KEYS[12] sessions
-- KEYS[13] tenant:{tenant}:sessions
-- KEYS[14] tenant:{tenant}:usage (absent: an older caller, no budgets)
-- ARGV: tenant, now (ms), group id, attempt's run id, new run id, the
-- attempt's session id, events maxlen, the new run's page, max queued,
-- session idle expiry (ms), then the names of the status `started`,
-- `completed` and of the session states `expiring` and `expired`; then
-- the tenant's budgets (each 0: none), as run_create reads them: bytes of
-- Redis its runs hold, bytes of its sessions' workspaces; then the grants
-- of the token that picks (as run_create reads them: "acme/app,tools/*",
-- "" none, "*" every one; missing: an older caller, not checked)
--
-- The pick run pushes nothing, but it opens a pull request on the
-- attempt's repository with the attempt's work: every repository of the
-- attempt (`repository`, `repositories`) must be granted to the token
-- that picks, as for a follow-up in its session (lib/grants.lua; "*"
-- lets any through).  It is one more queued run of the tenant:
-- run_create's budgets hold for it (not the sessions budget: it makes no
-- session).
--
-- Returns 1; 0 when the group or the attempt is unknown to this tenant
-- (or the attempt is not of that group, or not of that session);
-- {"grant", URL} when a repository of the attempt is not granted;
-- {"picked", RUN} when the group has its pick already; {"state", STATUS,
-- PR_STATUS} when the attempt has not ended completed with its branch
-- pushed; -1 when its session expired (or is expiring); -2 when the
-- tenant has max queued runs started already; -5 when the tenant's runs
-- hold its bytes budget, -7 when its workspaces hold its disk budget (as
-- run_create's).  Only 1 writes anything.
--@include grants
local T, now, G, P, N, S = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5],
                           ARGV[6]
local started, completed = ARGV[11], ARGV[12]

local g = redis.call('HMGET', KEYS[1], 'tenant', 'group_runs', 'picked')
if g[1] ~= T or not g[2] then return 0 end
local first, member = nil, false
for id in string.gmatch(g[2], '%S+') do
  first = first or id
  if id == P then member = true end
end
if first ~= G or not member then return 0 end

local p = redis.call('HMGET', KEYS[2], 'tenant', 'group', 'session',
                     'status', 'pr_status', 'group_attempt', 'title',
                     'pr_title', 'repository', 'repositories',
                     'base_branch', 'retention', 'max_running')
if p[1] ~= T or p[2] ~= G or p[3] ~= S then return 0 end

if ARGV[17] then
  local url = ungranted(ARGV[17], run_urls(p[9], p[10]), true)
  if url then return {'grant', url} end
end

if g[3] then return {'picked', g[3]} end
if p[4] ~= completed or p[5] ~= 'pushed' then
  return {'state', p[4] or '', p[5] or ''}
end

local s = redis.call('HMGET', KEYS[5], 'tenant', 'state')
if s[1] ~= T then return 0 end
if s[2] == ARGV[13] or s[2] == ARGV[14] then return -1 end
if redis.call('SCARD', KEYS[8]) >= tonumber(ARGV[9]) then return -2 end
if KEYS[14] then
  local u = redis.call('HMGET', KEYS[14], 'bytes', 'disk')
  local max_bytes, max_disk = tonumber(ARGV[15] or '0') or 0,
                              tonumber(ARGV[16] or '0') or 0
  if max_bytes > 0 and tonumber(u[1] or '0') >= max_bytes then
    return -5
  end
  if max_disk > 0 and tonumber(u[2] or '0') >= max_disk then return -7 end
end

local title = p[8]
if not title or title == '' then title = p[7] or '' end
redis.call('HSET', KEYS[1], 'picked', P)
redis.call('HSET', KEYS[2], 'pr_status', 'picked', 'pr_pick_run', N)
redis.call('HSET', KEYS[3], 'tenant', T, 'session', S,
  'task', 'Open the pull request of attempt ' .. (p[6] or '?')
          .. ' (' .. P .. ')',
  'title', 'Pull request: ' .. (p[7] or ''), 'repository', p[9] or '',
  'repositories', p[10] or '[]', 'branch', '', 'model', '',
  'create_pr', '1', 'base_branch', p[11] or '', 'pr_title', title,
  'draft', '0', 'watch_base', ARGV[8], 'timeout', '600',
  'status', started, 'created_at', now, 'max_running', p[13] or '0',
  'max_cost', '', 'retention', p[12] or '', 'image', '',
  'pr_of', P, 'group', G)
redis.call('HSET', KEYS[5], 'last_run', N, 'last_active', now)
redis.call('ZADD', KEYS[12], ARGV[10], S)
redis.call('ZADD', KEYS[13], now, S)
redis.call('SADD', KEYS[8], N)
redis.call('ZADD', KEYS[7], now, N)
redis.call('ZADD', KEYS[9], now, N)
redis.call('ZADD', KEYS[6], now, N)
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[7], '*',
  'type', 'lifecycle', 'data', '{"status":"' .. started .. '"}', 'ts', now)
redis.call('XADD', KEYS[10], '*', 'run', N)
redis.call('PUBLISH', KEYS[11], N .. ' ' .. started)
return 1
