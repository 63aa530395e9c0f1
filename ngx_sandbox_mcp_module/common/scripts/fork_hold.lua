-- A fork's copy under way (runner/fork.c): its hold on the forked
-- session's runs (run_create.lua put it in `forks`; claim.lua answers
-- `forking` while it lasts) pushed on, and the run's claim kept fresh,
-- so that no other runner takes the run while the copy goes on.
--
-- KEYS[1] session:{forked}:forks   KEYS[2] run:{id}
-- ARGV: run id, runner instance, now (ms), the hold from now (ms)
--
-- Returns 'ok'; 'lost' when the run's claim is not this runner's any
-- more; 'lapsed' when the hold is gone or ran out (the forked session's
-- runs may have gone on meanwhile: a copy now would not be of the state
-- the fork was asked of).  Only 'ok' writes.
if redis.call('HGET', KEYS[2], 'claimed_by') ~= ARGV[2] then
  return 'lost'
end

local now, hold = tonumber(ARGV[3]), tonumber(ARGV[4])
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) < now then return 'lapsed' end

redis.call('ZADD', KEYS[1], 'XX', now + hold, ARGV[1])
redis.call('PEXPIRE', KEYS[1], math.max(redis.call('PTTL', KEYS[1]), hold))
redis.call('HSET', KEYS[2], 'claimed_at', ARGV[3])
return 'ok'
