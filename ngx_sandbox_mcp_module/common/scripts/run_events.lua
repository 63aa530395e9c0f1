-- A page of a run's events (opencode_get_events).
--
-- KEYS[1] run:{id}   KEYS[2] run:{id}:events
-- ARGV: tenant, start id ('-' or '(<id>'), count
--
-- Returns the XRANGE reply, or nil (unknown run, or another tenant's).
if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[1] then return nil end
return redis.call('XRANGE', KEYS[2], ARGV[2], '+', 'COUNT', ARGV[3])
