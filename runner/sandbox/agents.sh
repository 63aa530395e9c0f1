# The agents besides OpenCode (SMCP_AGENT: claude-code, codex; issue 26,
# point 3), sourced by the entry script: functions only.
#
# Each is its vendor's own headless CLI, pinned, in an image of its own
# built FROM this one (runner/sandbox/build-agent-image: the binary and
# the label smcp.agent).  It runs as OpenCode does: in the run's
# repository, the task on stdin, as this user, behind the same egress;
# its key is the run token (the egress swaps it for the real key: no real
# key is in the sandbox), its provider's base URL the egress route.  Its
# conversation lives on the session volume ($oc/<agent>), so the
# session's next run continues it (SMCP_SESSION: the id its first run
# printed).  Its JSON lines go through agents/<agent>.jq, which prints
# them as OpenCode's events (text, tool_use, step_finish, error, each
# with the sessionID): the runner and the dashboard read nothing else.
# Nothing reaches it while it runs (opencode_send_message is OpenCode's).

agents_dir=/usr/local/lib/smcp/agents

# agent_other_start: the agent in the background, its lines through the
# map; sets agent_pid and mapper_pid (the map's process); 1 when the
# agent cannot run here (an error line printed, as OpenCode prints them)
agent_other_start() {
    local map=$agents_dir/$SMCP_AGENT.jq bin cmd=() want
    agent_base=null
    case $SMCP_AGENT in
        claude-code) bin=claude want=anthropic ;;
        codex)       bin=codex want=openai ;;
        *)           bin="" ;;
    esac
    if [ -z "$bin" ] || ! command -v "$bin" >/dev/null 2>&1 \
       || [ ! -r "$map" ]; then
        agent_config_error "agent $SMCP_AGENT: not in this sandbox image (runner --agent-images names its image)"
        return 1
    fi
    if [ "$provider" != "$want" ]; then
        agent_config_error "agent $SMCP_AGENT runs $want models, not $SMCP_MODEL"
        return 1
    fi
    # the conversation to continue: an id as the agent printed it (the
    # runner kept [A-Za-z0-9_-]); one that could pass for a flag is none
    [[ $session_id =~ ^[A-Za-z0-9][A-Za-z0-9_-]*$ ]] || session_id=""
    case $SMCP_AGENT in
        claude-code) agent_claude_code || return 1 ;;
        codex)       agent_codex || return 1 ;;
    esac
    exec {mapfd}> >(exec jq -ncR --unbuffered --argjson base "$agent_base" \
                             -f "$map")
    mapper_pid=$!
    "${cmd[@]}" < "$TMPDIR/smcp-task" >&"$mapfd" &
    agent_pid=$!
    exec {mapfd}>&-
    return 0
}

agent_config_error() {
    printf '{"type":"error","error":{"name":"ConfigError","data":{"message":%s}}}\n' \
        "$(json_str "$1")"
}

# Claude Code (the native binary of @anthropic-ai/claude-code): print
# mode, its events as stream-json, every tool allowed (the sandbox is the
# boundary) but web search and fetch (server-side tools the egress
# refuses; WebFetch asks claude.ai first), nothing sent but the model's
# requests, bounded retries.  The base URL is the egress route without
# /v1 (Claude Code adds /v1/messages), pinned by --settings too: a
# repository's .claude/settings.json `env` would otherwise override it.
agent_claude_code() {
    local base=${SMCP_PROVIDER_BASE_URL:-${SMCP_EGRESS_URL%/}/anthropic}
    local n env=""
    base=${base%/}
    base=${base%/v1}
    mkdir -p "$oc/claude"
    export CLAUDE_CONFIG_DIR=$oc/claude
    export ANTHROPIC_BASE_URL=$base
    export ANTHROPIC_API_KEY=$SMCP_RUN_TOKEN
    export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1
    export DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1
    export DISABLE_BUG_COMMAND=1 CLAUDE_CODE_MAX_RETRIES=4
    export API_TIMEOUT_MS=600000
    # the same again in --settings, over a repository's settings `env`
    for n in ANTHROPIC_BASE_URL CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC \
             DISABLE_AUTOUPDATER DISABLE_TELEMETRY DISABLE_ERROR_REPORTING \
             DISABLE_BUG_COMMAND CLAUDE_CODE_MAX_RETRIES API_TIMEOUT_MS; do
        env+="${env:+,}\"$n\":$(json_str "${!n}")"
    done
    cmd=(claude -p --output-format stream-json --verbose
         --model "$model" --permission-mode bypassPermissions
         --disallowedTools WebSearch,WebFetch
         --settings "{\"env\":{$env}}")
    # the run's spend cap, kept by Claude Code itself as it goes (it
    # tells its cost only at the end: the runner's watchdog sees it then)
    if [[ ${SMCP_MAX_COST_USD:-} =~ ^[0-9]+(\.[0-9]+)?$ ]] \
       && [ "$SMCP_MAX_COST_USD" != 0 ]; then
        cmd+=(--max-budget-usd "$SMCP_MAX_COST_USD")
    fi
    if [ -n "$session_id" ]; then
        cmd+=(--resume "$session_id")
    fi
}

# Codex CLI (the native binary of @openai/codex, its linux-x64 build):
# exec mode, its events as JSON lines, its own sandbox and approvals off
# (the container is the sandbox), a provider of the egress's OpenAI route
# keyed by the token (sent as Authorization: Bearer), and nothing else:
# no web search, tool search, plugins (a git ls-remote of GitHub), sub-
# agents, analytics, telemetry or update check, retries bounded (a
# refused connection is otherwise retried forever).  Its turn.completed
# counts the whole thread: a resumed run's map subtracts what the
# thread's last run ended with (its rollout's last token count; the
# agent could have written it: it moves only this run's token counts).
agent_codex() {
    local base=${SMCP_PROVIDER_BASE_URL:-${SMCP_EGRESS_URL%/}/openai/v1} f
    # made anew each run (not through whatever the agent left there)
    rm -rf "$oc/codex/config.toml" 2>/dev/null
    [ -d "$oc/codex" ] && [ ! -L "$oc/codex" ] || rm -rf "$oc/codex"
    mkdir -p "$oc/codex"
    export CODEX_HOME=$oc/codex
    printf '%s\n' \
        "model = \"$model\"" \
        'model_provider = "smcp"' \
        'check_for_update_on_startup = false' \
        'web_search = "disabled"' \
        'model_reasoning_summary = "auto"' \
        '[features]' \
        'plugins = false' \
        'unbounded_connection_retries = false' \
        '[agents]' \
        'enabled = false' \
        '[analytics]' \
        'enabled = false' \
        '[feedback]' \
        'enabled = false' \
        '[otel]' \
        'exporter = "none"' \
        'metrics_exporter = "none"' \
        'trace_exporter = "none"' \
        '[model_providers.smcp]' \
        'name = "smcp egress"' \
        "base_url = \"$base\"" \
        'wire_api = "responses"' \
        'env_key = "SMCP_RUN_TOKEN"' \
        'request_max_retries = 4' \
        'stream_max_retries = 4' \
        'supports_websockets = false' \
        > "$CODEX_HOME/config.toml" || {
        agent_config_error "agent codex: its configuration could not be written in $CODEX_HOME"
        return 1
    }
    cmd=(codex exec)
    if [ -n "$session_id" ]; then
        cmd+=(resume "$session_id")
        f=$(find "$CODEX_HOME/sessions" -type f \
                -name "rollout-*-$session_id.jsonl" 2>/dev/null \
            | sort | tail -n 1)
        if [ -n "$f" ]; then
            # its last total, numbers only (the file is the agent's to
            # write: nothing else of it goes anywhere)
            agent_base=$(tail -c 16777216 "$f" | jq -cR \
                'fromjson? | select(type == "object"
                  and .type == "event_msg" and (.payload | type) == "object"
                  and .payload.type == "token_count")
                | .payload.info.total_token_usage | objects
                | {input_tokens, cached_input_tokens, output_tokens,
                   reasoning_output_tokens}
                | map_values(if type == "number" and . >= 0 and . < 1e15
                             then floor else 0 end)' 2>/dev/null \
                | tail -n 1) || true
            [[ $agent_base =~ ^\{[a-z_\":0-9,]*\}$ ]] || agent_base=null
        fi
    fi
    cmd+=(--json --skip-git-repo-check
          --dangerously-bypass-approvals-and-sandbox -)
}
