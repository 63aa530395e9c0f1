-- A new MCP session (initialize).
--
-- KEYS[1] mcp:{sid}   KEYS[2] revoked
-- ARGV: tenant, protocol version, client name, client version, now (ms),
-- ttl (ms), token id (jti; '' when the worker's revoked set is current)
--
-- Returns 1 (created), 0 (the id is taken), or the status REVOKED (the
-- token's jti is in the hash `revoked`: nothing written).
if ARGV[7] ~= '' and redis.call('HEXISTS', KEYS[2], ARGV[7]) == 1 then
  return redis.status_reply('REVOKED')
end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'tenant', ARGV[1], 'protocol', ARGV[2],
  'client_name', ARGV[3], 'client_version', ARGV[4],
  'created_at', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1
