-- An MCP session ends (DELETE).
--
-- KEYS[1] mcp:{sid}   KEYS[2] revoked
-- ARGV: tenant, (unused: the ttl of the other session scripts), token id
-- (jti; '' when the worker's revoked set is current)
--
-- Returns 1 (deleted), 0 (unknown, or another tenant's: nothing deleted),
-- or the status REVOKED.
if ARGV[3] ~= '' and redis.call('HEXISTS', KEYS[2], ARGV[3]) == 1 then
  return redis.status_reply('REVOKED')
end
if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
