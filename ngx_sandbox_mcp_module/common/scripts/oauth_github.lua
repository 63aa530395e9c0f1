-- Which sandbox_mcp_oauth_github_allow rule lets a GitHub user in, by
-- what cannot be renamed away: a rule naming a login or an organization
-- is bound, at the first sign-in it lets in, to the numeric id it matched
-- then (the user's, the organization's), and from then on matches that
-- id only - whatever its login has become, never another account that
-- took the login.  A rule `id:N` names the user's id itself.  The user's
-- rules (id:, login) come before the organizations', each in the order
-- given.
--
-- KEYS[1] oauth:github:bound (hash: "login:<name>" | "org:<name>" -> id)
-- ARGV: the user's id, its login (lowercase), its organizations ("id:login"
-- each, lowercase, comma separated; '' for none), then the rules, each
-- "id:<n>", "login:<name>" or "org:<name>" (lowercase), in their order
--
-- Returns the number of the rule (1: the first of them), or 0: none lets
-- the user in.  Writes only the binding of the rule it returns, the first
-- time that rule lets someone in.
local uid, login = ARGV[1], ARGV[2]
local org_id, member = {}, {}
for id, name in string.gmatch(ARGV[3], '(%d+):([^,]+)') do
  org_id[name] = id
  member[id] = true
end

local function user_rule(kind) return kind == 'id' or kind == 'login' end

for pass = 1, 2 do
  for i = 4, #ARGV do
    local kind, name = string.match(ARGV[i], '^(%a+):(.+)$')
    if kind and user_rule(kind) == (pass == 1) then
      if kind == 'id' then
        if name == uid then return i - 3 end
      else
        local bound = redis.call('HGET', KEYS[1], ARGV[i])
        local id
        if kind == 'login' then
          if name == login then id = uid end
        else
          id = org_id[name]
        end
        if bound then
          if (kind == 'login' and bound == uid)
             or (kind == 'org' and member[bound]) then
            return i - 3
          end
        elseif id then
          redis.call('HSET', KEYS[1], ARGV[i], id)
          return i - 3
        end
      end
    end
  end
end
return 0
