-- A new run (opencode_run_task): its hash, the indexes, the first event,
-- the queue entry and the tenant's ping, at once.  No ping on run:{id}:
-- nobody can wait on a run before run_task answers with its id (the two
-- workers' pattern subscriptions heard it: 3% of the script in Redis).  Every check comes before the first
-- write.  The run indexes lose entries older than any run's keys can be
-- (the trim score): one run in 16, those whose id ends in 0, trims them
-- (the trims were 7% of what the script costs Redis; the readers skip an
-- entry whose run is gone, so one kept a little longer changes nothing).
--
-- KEYS[1] run:{id}   KEYS[2] run:{id}:events   KEYS[3] runs:{tenant}
-- KEYS[4] session:{sid}   KEYS[5] session:{sid}:runs
-- KEYS[6] session:{sid}:active   KEYS[7] tenant:{tenant}:started
-- KEYS[8] sessions   KEYS[9] queue   KEYS[10] tenant:{tenant}:sessions
-- KEYS[11] channel tenant:{tenant} ("<run id> <status>": the dashboard)
-- KEYS[12] tenant:{tenant}:usage (absent: an older caller, no budgets)
-- KEYS[13] egress:routes (what the egress proxy announced it serves)
-- KEYS[14] mcp:{mcp session}:runs (absent: no MCP session asks)
-- A fork (ARGV[41] names the session forked) has three keys before it:
-- KEYS[14] session:{forked}   KEYS[15] session:{forked}:active
-- KEYS[16] session:{forked}:forks
-- and mcp:{mcp session}:runs, when given, is KEYS[17].
-- ARGV: run id, tenant, session id, new session (1/0), now (ms), task,
-- repository (the URL the run names, or ""), branch, model, title,
-- create_pr (1/0), timeout (s), events maxlen, max queued, max running,
-- max cost (USD), retention (s), session idle ttl (s), session idle expiry
-- (ms), trim score (ms), then the names of the status `started` and of the
-- session states `expiring` and `expired`; then base branch, pr title,
-- draft (1/0), watch base (the run page's URL), the most repositories a
-- session may hold, the sessions' trim score (ms: older sessions' keys are
-- gone), the run's image ("" or missing: the runner's own), the token's
-- grants (its "repos" claim in lower case, without ".git", ',' between
-- them, e.g. "acme/app,tools/*"; "" or missing: none); then the tenant's
-- budgets (each 0: none): bytes of Redis its runs hold, live sessions,
-- bytes of its sessions' workspaces; then the egress route of the run's
-- model ("anthropic"; "" or missing: not checked); then, with KEYS[14],
-- how long an MCP session may live (s) and the most runs it remembers;
-- then the run's notification: its URL ("" or missing: none), format and
-- the watch link's lifetime (s) (finish.lua schedules it, the runner
-- sends it: runner/notify.c); then the session forked ("" or missing: no
-- fork) and how long its copy may hold that session's runs back (ms);
-- then the number of attempts ("" or missing: 1); then the agent named
-- ("" or missing: the session's, else the first offered), the agents
-- offered with their own models ("NAME=MODEL ...", MODEL empty: none;
-- "" or missing: any agent, none with a model) and whether the call named
-- its model (1/0); then, for each attempt after the first, its run id,
-- its session id and its run page's URL.
--
-- The agent (issue 26, point 3): a session keeps the agent of its first
-- run (its hash's `agent`; none: opencode), and a fork its forked
-- session's.  A run of an agent with a model of its own that names no
-- model runs that model; a run's model must be one its agent runs
-- (claude-code: anthropic/..., codex: openai/...).
--
-- Attempts (issue 26, point 1) are N runs of the same task, each the
-- first of a new session, made at once or not at all: every check holds
-- for all of them (N more queued runs, N more sessions).  The attempts
-- after the first have five keys each, after every other key: run:{id},
-- run:{id}:events, session:{sid}, session:{sid}:runs and
-- session:{sid}:active.  Each run's hash gets `group` (the first
-- attempt's run id: the group's id), `group_attempt` (1..N) and
-- `group_runs` (the runs' ids, space-separated, in order; not
-- `attempts`: claim.lua counts a run's claims there).  Not with a fork.
-- Attempts asking for a pull request that is no draft get `pr_pick`:
-- each pushes its branch, and the pull request waits for the attempt
-- picked (opencode_pick_attempt).
--
-- A fork starts a new session from a copy of another's (the forked
-- one's) workspace and OpenCode conversation: the new session's hash
-- gets `fork_of`, the forked one's `repositories` and `opencode_session`;
-- the forked session must be this tenant's, live and without a run queued
-- or going (its active set empty).  Until the runner has copied its
-- workspace, the forked session's runs wait: its `forks` set holds the
-- fork's run, scored by when that hold ends (claim.lua; the runner takes
-- it out once the copy is made).
--
-- The tenant's usage hash (docs/contracts.md, "Tenant budgets") is read
-- once; a new session is one more `sessions`, its workspace
-- `s:<session id>` (0 bytes until the runner measures it).  What the run
-- holds is counted when it ends (finish.lua, run_cancel.lua): the hot
-- path reads one key more and, for a new session, writes two fields.
-- The runner holds running runs to the same budgets (its --tenant-*
-- flags).
--
-- The session's `repositories` (a JSON array of URLs, first named first,
-- compared without case) gains the run's repository; the run gets that
-- array and its `repository`: the one it names, else the session's first.
-- The run reaches every one of them (it fetches them all, and clones,
-- pushes and opens its pull request on its own): each must be granted to
-- the token that asks, not only the one it names (the module checked
-- that one already; lib/grants.lua, where "*" covers only URLs
-- https://HOST/OWNER/NAME).
--
-- Returns 1; 0 when an existing session is unknown to this tenant (or a
-- new one's id is taken); -1 when it expired (or is expiring); -2 when the
-- tenant's queued runs would pass their most with this one (these N); -3
-- when the session holds the most repositories already and the run names
-- another; -4 when the run needs a repository (a branch, a pull request)
-- and has none; the URL of a repository of the run that the grants do not
-- cover; {"route", NAME, ROUTES} when the egress announced its routes
-- (ROUTES, space-separated) and the run needs NAME, which is not one of
-- them: its model's, or "github" for a run with a repository; -5 when the
-- tenant's runs hold its bytes budget, -6 when the new session (the N new
-- ones) would pass its sessions budget, -7 when its workspaces hold its
-- disk budget; for a fork, -8 when the forked session has a run queued or
-- going, -9 when it is unknown to this tenant, -10 when it expired (or is
-- expiring); {"agent", "session", AGENT} when the run names an agent
-- other than its session's (AGENT), {"agent", "offered", AGENT} when its
-- session's agent is not offered, {"agent", "model", AGENT, MODEL} when
-- the model is not one the agent runs.  Only 1 writes anything.
--@include grants
local started, expiring, expired = ARGV[21], ARGV[22], ARGV[23]
local usage = KEYS[12] or ''
local fork = ARGV[41] or ''
local n = tonumber(ARGV[43] or '') or 1
local base = #KEYS - 5 * (n - 1)
if n > 1 and (ARGV[4] ~= '1' or fork ~= '') then
  return redis.error_reply('attempts start new sessions, not forks')
end
local mcp_runs = nil
if fork ~= '' then
  if base >= 17 then mcp_runs = KEYS[17] end
elseif base >= 14 then
  mcp_runs = KEYS[14]
end

-- each attempt: its run id, session id, run page and five keys
local runs = {{ARGV[1], ARGV[3], ARGV[27], KEYS[1], KEYS[2], KEYS[4],
               KEYS[5], KEYS[6]}}
for i = 2, n do
  local a, k = 47 + 3 * (i - 2), base + 5 * (i - 2)
  runs[i] = {ARGV[a], ARGV[a + 1], ARGV[a + 2], KEYS[k + 1], KEYS[k + 2],
             KEYS[k + 3], KEYS[k + 4], KEYS[k + 5]}
end

local repos, oc_session, s_agent = {}, nil, nil
if ARGV[4] == '1' then
  for _, r in ipairs(runs) do
    if redis.call('EXISTS', r[6]) == 1 then return 0 end
  end
  if fork ~= '' then
    local f = redis.call('HMGET', KEYS[14], 'tenant', 'state',
                         'repositories', 'opencode_session', 'agent')
    if f[1] ~= ARGV[2] then return -9 end
    if f[2] == expiring or f[2] == expired then return -10 end
    if redis.call('ZCARD', KEYS[15]) > 0 then return -8 end
    if f[3] then repos = cjson.decode(f[3]) end
    oc_session = f[4]
    s_agent = f[5] or 'opencode'
  end
else
  local s = redis.call('HMGET', KEYS[4], 'tenant', 'state', 'repositories',
                       'agent')
  if s[1] ~= ARGV[2] then return 0 end
  if s[2] == expiring or s[2] == expired then return -1 end
  if s[3] then repos = cjson.decode(s[3]) end
  s_agent = s[4] or 'opencode'
end

-- the run's agent and model
local offered, first = {}, nil
for name, m in string.gmatch(ARGV[45] or '', '([^ =]+)=([^ ]*)') do
  offered[name] = m
  first = first or name
end
local agent, model, route = ARGV[44] or '', ARGV[9], ARGV[35] or ''
if agent ~= '' and s_agent and agent ~= s_agent then
  return {'agent', 'session', s_agent}
end
if agent == '' then agent = s_agent or first or 'opencode' end
if first and not offered[agent] then return {'agent', 'offered', agent} end
if ARGV[46] ~= '1' and (offered[agent] or '') ~= '' then
  model = offered[agent]
end
local provider = ({['claude-code'] = 'anthropic', codex = 'openai'})[agent]
if provider then
  if string.sub(model, 1, #provider + 1) ~= provider .. '/' then
    return {'agent', 'model', agent, model}
  end
  -- (their providers' routes bear the providers' names)
  if model ~= ARGV[9] and route ~= '' then route = provider end
end
-- an image is OpenCode's: another agent runs in its own (the runner's)
local image = ARGV[30] or ''
if agent ~= 'opencode' then image = '' end

local own, seen = ARGV[7], false
for _, url in ipairs(repos) do
  if own ~= '' and string.lower(url) == string.lower(own) then
    own, seen = url, true
  end
end
if own == '' then
  own, seen = repos[1] or '', true
end
if not seen then
  if #repos >= tonumber(ARGV[28]) then return -3 end
  repos[#repos + 1] = own
end
if own == '' and (ARGV[8] ~= '' or ARGV[11] == '1') then return -4 end

local url = ungranted(ARGV[31], repos, false)
if url then return url end

-- the routes the run needs: nothing announced (or an older caller
-- without the key), nothing checked
local routes = KEYS[13] and redis.call('GET', KEYS[13])
if routes then
  local have = ' ' .. routes .. ' '
  if route ~= '' and not string.find(have, ' ' .. route .. ' ', 1, true) then
    return {'route', route, routes}
  end
  if #repos > 0 and not string.find(have, ' github ', 1, true) then
    return {'route', 'github', routes}
  end
end

-- the URLs are checked (https, host, owner, name): nothing to escape
local list = '[]'
if #repos > 0 then list = '["' .. table.concat(repos, '","') .. '"]' end

if redis.call('SCARD', KEYS[7]) + n > tonumber(ARGV[14]) then return -2 end

local max_bytes, max_sessions, max_disk =
  tonumber(ARGV[32] or '0'), tonumber(ARGV[33] or '0'),
  tonumber(ARGV[34] or '0')
if usage ~= '' then
  local u = redis.call('HMGET', usage, 'bytes', 'sessions', 'disk')
  if max_bytes > 0 and tonumber(u[1] or '0') >= max_bytes then
    return -5
  end
  if ARGV[4] == '1' and max_sessions > 0
     and tonumber(u[2] or '0') + n > max_sessions then
    return -6
  end
  if max_disk > 0 and tonumber(u[3] or '0') >= max_disk then return -7 end
end

local ids = {}
for i, r in ipairs(runs) do ids[i] = r[1] end
ids = table.concat(ids, ' ')

-- one run and its session: r as `runs` holds them, k its attempt (1..n)
local function create(r, k)
  local run, ses, K1, K2, K4, K5, K6 =
    r[1], r[2], r[4], r[5], r[6], r[7], r[8]
  if ARGV[4] == '1' then
    redis.call('HSET', K4, 'tenant', ARGV[2], 'created_at', ARGV[5],
      'last_run', run, 'last_active', ARGV[5], 'idle_ttl', ARGV[18],
      'retention', ARGV[17], 'repositories', list, 'agent', agent)
    if fork ~= '' then
      redis.call('HSET', K4, 'fork_of', fork)
      if oc_session then
        redis.call('HSET', K4, 'opencode_session', oc_session)
      end
      -- the forked session's runs wait for the copy (claim.lua); the hold
      -- ends by itself should the fork's run never get to it
      local hold = tonumber(ARGV[5]) + tonumber(ARGV[42])
      redis.call('ZADD', KEYS[16], hold, run)
      redis.call('ZREMRANGEBYSCORE', KEYS[16], '-inf', '(' .. ARGV[5])
      redis.call('PEXPIRE', KEYS[16], ARGV[42])
      -- forked now: the forked session was active (its idle clock anew)
      redis.call('HSET', KEYS[14], 'last_active', ARGV[5])
      redis.call('ZADD', KEYS[8], ARGV[19], fork)
      redis.call('ZADD', KEYS[10], ARGV[5], fork)
    end
  else
    redis.call('HSET', K4, 'last_run', run, 'last_active', ARGV[5],
      'idle_ttl', ARGV[18], 'retention', ARGV[17], 'repositories', list)
  end
  redis.call('ZADD', KEYS[8], ARGV[19], ses)
  redis.call('ZADD', KEYS[10], ARGV[5], ses)

  redis.call('HSET', K1, 'tenant', ARGV[2], 'session', ses,
    'task', ARGV[6], 'repository', own, 'repositories', list,
    'branch', ARGV[8], 'model', model, 'title', ARGV[10],
    'create_pr', ARGV[11], 'base_branch', ARGV[24], 'pr_title', ARGV[25],
    'draft', ARGV[26], 'watch_base', r[3],
    'timeout', ARGV[12], 'status', started, 'created_at', ARGV[5],
    'max_running', ARGV[15], 'max_cost', ARGV[16], 'retention', ARGV[17],
    'image', image, 'agent', agent)
  if fork ~= '' then redis.call('HSET', K1, 'fork_of', fork) end
  if n > 1 then
    redis.call('HSET', K1, 'group', ARGV[1], 'group_attempt', k,
               'group_runs', ids)
    -- a pull request, not a draft: only for the attempt picked
    -- (opencode_pick_attempt, run_pick.lua)
    if ARGV[11] == '1' and ARGV[26] ~= '1' then
      redis.call('HSET', K1, 'pr_pick', '1')
    end
  end
  if (ARGV[38] or '') ~= '' then
    redis.call('HSET', K1, 'notify_url', ARGV[38],
               'notify_format', ARGV[39], 'notify_ttl', ARGV[40])
  end

  -- a new session's id is new (checked above): no HSETNX needed
  if usage ~= '' and ARGV[4] == '1' then
    redis.call('HSET', usage, 's:' .. ses, 0)
    redis.call('HINCRBY', usage, 'sessions', 1)
  end

  redis.call('SADD', KEYS[7], run)
  redis.call('ZADD', K6, ARGV[5], run)
  redis.call('ZADD', KEYS[3], ARGV[5], run)
  redis.call('ZADD', K5, ARGV[5], run)
  if string.byte(run, -1) == 48 then
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[20])
    redis.call('ZREMRANGEBYSCORE', K5, '-inf', '(' .. ARGV[20])
    redis.call('ZREMRANGEBYSCORE', KEYS[10], '-inf', '(' .. ARGV[29])
  end

  redis.call('XADD', K2, 'MAXLEN', '~', ARGV[13], '*',
    'type', 'lifecycle', 'data', '{"status":"' .. started .. '"}',
    'ts', ARGV[5])
  redis.call('XADD', KEYS[9], '*', 'run', run)

  -- the MCP session that started it hears its lifecycle (its GET stream):
  -- the newest runs it started, before the PUBLISH that says `started`
  if mcp_runs then
    redis.call('ZADD', mcp_runs, ARGV[5], run)
    redis.call('ZREMRANGEBYRANK', mcp_runs, 0, -1 - tonumber(ARGV[37]))
    redis.call('EXPIRE', mcp_runs, ARGV[36])
  end
  redis.call('PUBLISH', KEYS[11], run .. ' ' .. started)
end

for k, r in ipairs(runs) do create(r, k) end
return 1
