-- Claim a queued run for one runner process, atomically.
--
-- KEYS[1] run:{id}
-- KEYS[2] session:{session}:active   ('' when the run has no session)
-- KEYS[3] tenant:{tenant}:started    ('' when the run has no tenant)
-- KEYS[4] tenant:{tenant}:claimed    ('' when the run has no tenant)
-- KEYS[5] session:{session}:forks    ('' when the run has no session;
--                                     absent: an older caller)
-- ARGV: run id, runner instance, now (ms), stale claim (ms)
--
-- The run must still be `started`; no other live runner may hold it (a
-- claim older than the stale age was left by a runner that died starting
-- it); it must be the first of its session's unfinished runs (runs of a
-- session are serialised: the lowest score of session:{id}:active, ties
-- by id); its session must not be being forked (a fork's run holds it,
-- in `forks`, until its copy is made: run_create.lua); and the tenant's
-- claimed runs, itself aside, must be fewer than
-- the run's `max_running` (absent or < 1: no limit).  On ok the run moves
-- from the tenant's started set to its claimed set.
--
-- Returns 'ok' (claimed; `attempts` counts it), 'unlisted' (the run is not
-- in its session's active set: queued by an older nginx), 'wait' (an
-- earlier run of its session is unfinished), 'forking' (a fork of its
-- session is being copied), 'limit' (the tenant has
-- max_running runs claimed), 'claimed' (another runner holds it), or the
-- status that stops it ('missing', 'running', 'completed', ...).
local h = redis.call('HMGET', KEYS[1], 'status', 'claimed_by', 'claimed_at',
                     'max_running')
if not h[1] then return 'missing' end
if h[1] ~= 'started' then return h[1] end

local now, stale = tonumber(ARGV[3]), tonumber(ARGV[4])

if h[2] and h[2] ~= ARGV[2] and now - tonumber(h[3] or '0') < stale then
  return 'claimed'
end

if KEYS[2] ~= '' then
  local rank = redis.call('ZRANK', KEYS[2], ARGV[1])
  if not rank then return 'unlisted' end
  if rank > 0 then return 'wait' end
end

if (KEYS[5] or '') ~= ''
   and redis.call('ZCOUNT', KEYS[5], ARGV[3], '+inf') > 0 then
  return 'forking'
end

local max = tonumber(h[4] or '')
if KEYS[4] ~= '' and max and max >= 1 then
  local n = redis.call('SCARD', KEYS[4])
            - redis.call('SISMEMBER', KEYS[4], ARGV[1])
  if n >= max then return 'limit' end
end

if KEYS[3] ~= '' then redis.call('SREM', KEYS[3], ARGV[1]) end
if KEYS[4] ~= '' then redis.call('SADD', KEYS[4], ARGV[1]) end
redis.call('HSET', KEYS[1], 'claimed_by', ARGV[2], 'claimed_at', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'attempts', 1)
return 'ok'
