-- An ended run's keys have expired: the bytes it held come off its
-- tenant's usage, once (the runner's janitor, for each member of
-- budget:expiry due; several runners may meet the same member).
--
-- KEYS[1] budget:expiry   KEYS[2] tenant:{tenant}:usage (of the member's
--                         tenant)
-- ARGV: the member ("<run id> <bytes> <tenant>"), its bytes
--
-- Returns 1 (taken off), or 0 (another runner did it first).
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('HINCRBY', KEYS[2], 'bytes', -tonumber(ARGV[2])) < 0 then
  redis.call('HSET', KEYS[2], 'bytes', 0)
end
return 1
