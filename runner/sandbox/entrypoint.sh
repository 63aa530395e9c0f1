#!/bin/bash
# Sandbox entry point: the container's main process.
#
# Prepares the agent's world from what the runner passes in the
# environment, then runs OpenCode on the task (or, for tests and debugging,
# whatever command was given as arguments).  Nothing here is secret: the
# only credential is SMCP_RUN_TOKEN, scoped to this run and accepted only by
# the egress proxy while the run is live.  Real keys never enter the
# sandbox; the proxy adds them on the way out.
#
#   SMCP_EGRESS_URL        http://<gateway>:<port>, the egress listener
#   SMCP_RUN_TOKEN         the run-scoped egress token
#   SMCP_MODEL             provider/model, e.g. anthropic/claude-sonnet-4-5
#   SMCP_PROVIDER_BASE_URL the provider's API base through the proxy
#                          (default $SMCP_EGRESS_URL/<provider>/v1)
#   SMCP_REPOSITORY        https://<git host>/<owner>/<repo> (optional)
#   SMCP_BRANCH            branch to check out (optional)
#   SMCP_GIT_HOST          the git host the proxy stands in for (github.com)
#   SMCP_SESSION           OpenCode session id to continue (optional)
#   SMCP_TASK              the task text (opencode reads it on stdin)
#
# Layout of the session volume: /workspace/repo is the worktree,
# /workspace/.oc holds OpenCode's XDG dirs (kept apart from the worktree so
# they stay out of snapshots and diffs).
set -euo pipefail
umask 022

ws=/workspace
repo=$ws/repo
oc=$ws/.oc

: "${SMCP_EGRESS_URL:?SMCP_EGRESS_URL is not set}"
: "${SMCP_RUN_TOKEN:?SMCP_RUN_TOKEN is not set}"
: "${SMCP_MODEL:=anthropic/claude-sonnet-4-5}"
: "${SMCP_GIT_HOST:=github.com}"

provider=${SMCP_MODEL%%/*}
model=${SMCP_MODEL#*/}
base_url=${SMCP_PROVIDER_BASE_URL:-$SMCP_EGRESS_URL/$provider/v1}

export HOME=${HOME:-/home/sandbox}
export XDG_CONFIG_HOME=$oc/config XDG_DATA_HOME=$oc/data
export XDG_CACHE_HOME=$oc/cache XDG_STATE_HOME=$oc/state
export TMPDIR=${TMPDIR:-/tmp}
export OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1
export OPENCODE_DISABLE_DEFAULT_PLUGINS=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1
export OPENCODE_DISABLE_SHARE=1 OPENCODE_DISABLE_CLAUDE_CODE=1
export OPENCODE_DISABLE_EXTERNAL_SKILLS=1

mkdir -p "$repo" "$XDG_CONFIG_HOME/opencode" "$XDG_DATA_HOME" \
         "$XDG_CACHE_HOME" "$XDG_STATE_HOME" "$HOME"

lifecycle() {
    # one JSON line on stdout, beside OpenCode's own events
    printf '{"type":"smcp","step":"%s"%s}\n' "$1" "${2:+,$2}"
}

json_str() {
    # a JSON string literal (no jq in the image)
    local s=$1
    s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\n'/\\n}; s=${s//$'\r'/\\r}
    s=${s//$'\t'/\\t}
    printf '"%s"' "$s"
}

# OpenCode: the provider points at the egress route; its "key" is the run
# token.  A custom OpenAI-compatible provider needs its package and model
# declared.
provider_extra=""
if [ "$provider" = compat ]; then
    provider_extra=$(printf ',"npm":"@ai-sdk/openai-compatible","name":"compat","models":{%s:{}}' \
                     "$(json_str "$model")")
fi

cat > "$XDG_CONFIG_HOME/opencode/opencode.json" <<JSON
{
  "\$schema": "https://opencode.ai/config.json",
  "autoupdate": false,
  "share": "disabled",
  "snapshot": false,
  "model": $(json_str "$SMCP_MODEL"),
  "small_model": $(json_str "$SMCP_MODEL"),
  "provider": {
    $(json_str "$provider"): {
      "options": {
        "baseURL": $(json_str "$base_url"),
        "apiKey": $(json_str "$SMCP_RUN_TOKEN")
      }$provider_extra
    }
  }
}
JSON

# stops OpenCode's background npm install of its plugin package (the
# network is closed anyway; this keeps it from trying)
mkdir -p "$XDG_CONFIG_HOME/opencode/node_modules"
printf '{"packages":{"":{"dependencies":{"@opencode-ai/plugin":"*"}}}}\n' \
    > "$XDG_CONFIG_HOME/opencode/package-lock.json"

# git: the git host is reached through the proxy, which adds the real
# token; the sandbox authenticates with its run token
basic=$(printf 'x-access-token:%s' "$SMCP_RUN_TOKEN" | base64 -w0)
git config --global url."$SMCP_EGRESS_URL/github/".insteadOf "https://$SMCP_GIT_HOST/"
git config --global http."$SMCP_EGRESS_URL/".extraHeader "Authorization: Basic $basic"
git config --global user.name "OpenCode sandbox"
git config --global user.email "sandbox@localhost"
git config --global init.defaultBranch main
git config --global safe.directory "$repo"

if [ $# -gt 0 ]; then
    exec "$@"
fi

if [ -n "${SMCP_REPOSITORY:-}" ] && [ ! -d "$repo/.git" ]; then
    lifecycle clone "\"repository\":$(json_str "$SMCP_REPOSITORY")"
    if ! git clone --quiet ${SMCP_BRANCH:+--branch "$SMCP_BRANCH"} \
             "$SMCP_REPOSITORY" "$repo" 2>"$TMPDIR/clone.err"; then
        lifecycle clone_failed "\"message\":$(json_str "$(tail -c 2000 "$TMPDIR/clone.err")")"
        exit 3
    fi
elif [ ! -d "$repo/.git" ]; then
    git -C "$repo" init --quiet
fi

cd "$repo"

args=(run --format json --auto --model "$SMCP_MODEL")
[ -n "${SMCP_SESSION:-}" ] && args+=(--session "$SMCP_SESSION")

lifecycle agent_start
set +e
printf '%s' "${SMCP_TASK:-}" | opencode "${args[@]}"
status=$?
set -e
lifecycle agent_exit "\"exitCode\":$status"

# the diff, the run's last line: the runner stores it (untrusted input:
# no external diff drivers, textconv or fsmonitor from the repo's config)
git add -N . 2>/dev/null || true
diff=$(git -c core.fsmonitor= diff --no-ext-diff --no-textconv HEAD 2>/dev/null \
       || git -c core.fsmonitor= diff --no-ext-diff --no-textconv 2>/dev/null || true)
lifecycle diff "\"diff\":$(json_str "$diff")"

exit $status
