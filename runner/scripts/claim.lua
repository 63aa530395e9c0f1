-- Claim a queued run for one runner process, atomically.
--
-- KEYS[1] run:{id}   KEYS[2] tenant:{tenant}:active ('' when unknown)
-- KEYS[3] session:{session}:runs ('' when unknown)
-- ARGV: run id, runner instance, key prefix, now (ms), stale claim (ms)
--
-- The run must still be `started`; no other live runner may hold it (a
-- claim older than the stale age was left by a runner that died starting
-- it); every earlier run of its session must have ended (runs of a session
-- are serialised); and the tenant may not have `max_running` runs claimed
-- already (members of the active set claimed and started or running;
-- members whose run is gone or ended are dropped).
--
-- Returns 'ok' (claimed; `attempts` counts it), 'wait', 'claimed', or the
-- status that stops it ('missing', 'running', 'completed', ...).
local h = redis.call('HMGET', KEYS[1], 'status', 'claimed_by', 'claimed_at',
                     'max_running')
if not h[1] then return 'missing' end
if h[1] ~= 'started' then return h[1] end

local now, stale = tonumber(ARGV[4]), tonumber(ARGV[5])

if h[2] and h[2] ~= ARGV[2] and now - tonumber(h[3] or '0') < stale then
  return 'claimed'
end

if KEYS[3] ~= '' then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    if id == ARGV[1] then break end
    local s = redis.call('HGET', ARGV[3] .. 'run:' .. id, 'status')
    if s == 'started' or s == 'running' then return 'wait' end
  end
end

local max = tonumber(h[4] or '')
if KEYS[2] ~= '' and max and max >= 1 then
  local n = 0
  for _, id in ipairs(redis.call('SMEMBERS', KEYS[2])) do
    if id ~= ARGV[1] then
      local r = redis.call('HMGET', ARGV[3] .. 'run:' .. id, 'status',
                           'claimed_by', 'claimed_at')
      if r[1] ~= 'started' and r[1] ~= 'running' then
        redis.call('SREM', KEYS[2], id)
      elseif r[2] and (r[1] == 'running'
                       or now - tonumber(r[3] or '0') < stale) then
        n = n + 1
      end
    end
  end
  if n >= max then return 'wait' end
end

if KEYS[2] ~= '' then redis.call('SADD', KEYS[2], ARGV[1]) end
redis.call('HSET', KEYS[1], 'claimed_by', ARGV[2], 'claimed_at', ARGV[4])
redis.call('HINCRBY', KEYS[1], 'attempts', 1)
return 'ok'
