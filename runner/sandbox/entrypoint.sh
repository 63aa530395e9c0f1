#!/bin/bash
# Sandbox entry point: the container's main process.
#
# Prepares the agent's world from what the runner passes in the
# environment, then runs OpenCode on the task (or, for tests and debugging,
# whatever command was given as arguments) through an OpenCode server in
# the sandbox (a pooled sandbox's warm one, else its own, started while
# the repository is cloned), where a message sent to the running agent
# (opencode_send_message) reaches it (below, "How the agent runs").  Nothing here is secret: the
# only credential is SMCP_RUN_TOKEN, scoped to this run and accepted only by
# the egress proxy while the run is live.  Real keys never enter the
# sandbox; the proxy adds them on the way out.
#
#   SMCP_EGRESS_URL        http://<gateway>:<port>, the egress listener
#   SMCP_RUN_TOKEN         the run-scoped egress token
#   SMCP_MODEL             provider/model, e.g. anthropic/claude-sonnet-4-5
#                          (cloudflare-ai-gateway/VENDOR/MODEL: VENDOR's
#                          model through Cloudflare AI Gateway; VENDOR one
#                          of anthropic, openai, google-ai-studio)
#   SMCP_PROVIDER_BASE_URL the provider's API base through the proxy
#                          (default $SMCP_EGRESS_URL/<provider>/v1; google:
#                          .../google/v1beta, azure: .../azure/openai/v1,
#                          the bases their SDKs expect; Cloudflare:
#                          .../cloudflare/<the gateway's path for VENDOR>)
#   SMCP_REPOSITORY        https://<git host>/<owner>/<repo> (optional): the
#                          run's own, where the agent works
#   SMCP_REPOSITORIES      the session's repositories, space-separated, in
#                          the order first named (default SMCP_REPOSITORY):
#                          the first at /workspace/repo, each further one at
#                          /workspace/repo-<owner>-<name>; cloned when
#                          missing, fetched when present
#   SMCP_BRANCH            branch to check out (optional; on a follow-up
#                          created from HEAD when missing)
#   SMCP_CREATE_PR         1: after OpenCode exits 0, what changed since the
#                          run started (the agent's commits included) is
#                          committed on opencode/<SMCP_RUN_ID> and pushed
#   SMCP_BASE_BRANCH       the pull request's base (the runner opens it)
#   SMCP_GIT_AUTHOR_NAME, SMCP_GIT_AUTHOR_EMAIL   the commits' author
#   SMCP_GIT_HOST          the git host the proxy stands in for (github.com)
#   SMCP_SESSION           OpenCode session id to continue (optional)
#   SMCP_TASK              the task text (opencode reads it on stdin)
#   SMCP_TITLE             title of a new OpenCode session (optional; default
#                          the task's first line, at most 80 characters).
#                          A session with a title makes OpenCode skip its
#                          title-generation request to the model.
#   SMCP_POOL              1: a pooled sandbox (the runner's --pool): the
#                          rest arrives when a run takes it (below); with
#                          SMCP_EGRESS_URL given too, OpenCode's server is
#                          started and warmed while it waits, and the run
#                          attaches to it (a "warm run", below)
#   SMCP_AGENT             the agent, when not OpenCode: claude-code or codex
#                          (agents.sh: its own binary, in an image built
#                          FROM this one; its lines mapped onto OpenCode's)
#   SMCP_MAX_COST_USD      with SMCP_AGENT: the run's spend cap (0: none),
#                          which Claude Code keeps itself (--max-budget-usd)
#   SMCP_DIFF_MAX          bytes the diff line may take, newline included
#                          (default 10485760): a longer diff is cut at a
#                          line boundary and marked "truncated":true
#
# Output (stdout): OpenCode's JSON events, one per line, framed by lifecycle
# lines {"type":"smcp","step":...}: clone (repository) | clone_failed
# (message) | fetch (repository) | fetch_failed (repository, message) |
# branch (name, created) | branch_failed (name, message) | agent_start
# (warm: true on a warm run) |
# agent_exit (exitCode, and signal when the container was asked to stop) |
# pushed (branch, commit) | push_failed (message) | pr_skipped (reason) |
# diff (diff: the run's changes as a unified diff, the
# last line; truncated: true when it was cut to fit SMCP_DIFF_MAX).  The
# whole diff is left in /workspace/.oc/smcp/diff.
#
# Stopping: SIGTERM/SIGINT/SIGHUP are passed on to OpenCode; the script
# still prints agent_exit and the diff, then exits with OpenCode's status.
# Once OpenCode has exited every other process of the sandbox is killed
# before agent_exit: the runner reads the push, pull request and diff lines
# only after the last agent_exit, which no agent process outlives.  After
# it nothing the agent wrote is run or obeyed: PATH loses the directories
# it could write, and the git steps are git-after.sh's (a git directory of
# their own; the diff printed is that of the commit pushed).
#
# A warm run (a pooled sandbox, SMCP_POOL=1): while it waits, the sandbox runs
# `opencode serve` on 127.0.0.1:4096 and key-relay on 127.0.0.1:4097, and warms
# the server with one prompt in /workspace/repo, an empty repository until
# the handover (the relay answers it 401).  At the handover it is used when
# the warm-up is done (waited for up to 120 s: an OpenCode starting is no
# slower to wait for than one started anew) and the server healthy, the run
# starts a new session (no SMCP_SESSION; a sandbox held for a session serves
# its session), the model's provider is anthropic, openai or google (not
# through Cloudflare), no SMCP_PROVIDER_BASE_URL is set, the egress URL is the
# one the relay was started with and no command was given; otherwise every
# process of it is killed and the run starts OpenCode cold, as without the
# pool.  A warm run writes the token for the relay and the run's environment for
# the tools (BASH_ENV) in /tmp/smcp-warm (0700, tmpfs), does the usual setup
# (git, clone, branch), then makes the session and sends the prompt through the
# server's HTTP API as `opencode run --auto` does (the title, the permissions it
# denies, the model, the task): no OpenCode client is started.  Its lines come
# from session-events (the server's event stream, printed as `opencode run
# --format json` prints them; it answers permission requests "once", as
# --auto).  Stop signals end the prompt's request; kill -KILL -1 then ends the
# server and the relay with the rest.  Differences from a cold run: the server's
# configuration is the warm one (no small_model: OpenCode's choice for the
# provider; the run token only in the relay's file).  The server's instance of
# /workspace/repo (seconds to make: the git project, its tools, OpenCode's
# services for the directory) is made by the warm-up, on an empty repository
# (so OpenCode tells the model "Is directory a git repo: yes", as after the
# clone); the handover removes that repository and the run's clone fills the
# directory.  OpenCode reads AGENTS.md at each prompt, but its configuration
# only when it makes an instance: a repository with its own (opencode.json,
# opencode.jsonc, .opencode) has the instance made anew at its prompt, as a
# cold run does (warm_fresh).
#
# Layout of the session volume: /workspace/repo is the worktree,
# /workspace/.oc holds OpenCode's XDG dirs (kept apart from the worktree so
# they stay out of snapshots and diffs).
set -euo pipefail
umask 022

ws=/workspace
repo=$ws/repo
oc=$ws/.oc

export HOME=${HOME:-/home/sandbox}
export XDG_CONFIG_HOME=$oc/config XDG_DATA_HOME=$oc/data
export XDG_CACHE_HOME=$oc/cache XDG_STATE_HOME=$oc/state
export TMPDIR=${TMPDIR:-/tmp}
export OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1
export OPENCODE_DISABLE_DEFAULT_PLUGINS=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1
export OPENCODE_DISABLE_SHARE=1 OPENCODE_DISABLE_CLAUDE_CODE=1
export OPENCODE_DISABLE_EXTERNAL_SKILLS=1
# OpenCode is a Bun program: JavaScriptCore's top JIT tier (FTL) compiles
# its hot functions again, at a cost an agent that mostly waits on the
# model never earns back (bench/agent-cpu: 7-9% less CPU a run without
# it, and no slower).  An image built on this one may set it to 1.
export BUN_JSC_useFTLJIT=${BUN_JSC_useFTLJIT:-0}

mkdir -p "$repo" "$XDG_CONFIG_HOME/opencode" "$XDG_DATA_HOME" \
         "$XDG_CACHE_HOME" "$XDG_STATE_HOME" "$HOME" "$oc/smcp"

# stops OpenCode's background npm install of its plugin package (the
# network is closed anyway; this keeps it from trying)
mkdir -p "$XDG_CONFIG_HOME/opencode/node_modules"
printf '{"packages":{"":{"dependencies":{"@opencode-ai/plugin":"*"}}}}\n' \
    > "$XDG_CONFIG_HOME/opencode/package-lock.json"

# The warm pool's OpenCode (SMCP_POOL=1 with SMCP_EGRESS_URL given at creation):
# OpenCode's start is ~90% of a cold run's time to its first model request, so a
# pooled sandbox starts `opencode serve` (127.0.0.1 only) ahead and warms it
# with one prompt in $repo (an empty repository, removed at the handover;
# held for a session, in its last run's directory).  A warmed server
# keeps the provider key it first read, so its providers (those of
# warm_providers) point at key-relay on 127.0.0.1 with a fixed placeholder key;
# the relay forwards to the egress with the placeholder swapped for the run
# token, read at each request from $warm/token (none before the handover: it
# answers 401 itself, which ends the warm-up prompt at once).  Nothing of a run
# is in it: no token, no task.  The server, the relay and the warm-up print
# nothing on the container's output (their logs are in $warm).  The server's
# tools get the run's environment through BASH_ENV ($warm/env, written at the
# handover: what the entry script exported since the server started, as a cold
# run's agent would inherit it).
warm=$TMPDIR/smcp-warm
warm_port=4096
warm_relay_port=4097
warm_key=smcp-pool-placeholder-not-a-token
warm_providers="anthropic openai google"
warm_egress=""
warm_blank=0
declare -A warm_env0=()

# the directory the session's last run worked in ($oc/smcp/oc-dir, which
# the entry script writes; the agent could have made it anything: only a
# regular file is read, 512 bytes at most), else nothing
oc_dir_read() {
    local f=$oc/smcp/oc-dir
    [ -f "$f" ] && [ ! -L "$f" ] && head -c 512 "$f" 2>/dev/null
    return 0
}

warm_start() {
    local r=http://127.0.0.1:$warm_relay_port n relay
    [[ ${SMCP_EGRESS_URL:-} =~ ^http://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?$ ]] \
        || return 0
    command -v perl >/dev/null 2>&1 && command -v curl >/dev/null 2>&1 \
        || return 0
    warm_egress=${SMCP_EGRESS_URL%/}
    mkdir -m 0700 "$warm"
    cat > "$XDG_CONFIG_HOME/opencode/opencode.json" <<JSON
{
  "\$schema": "https://opencode.ai/config.json",
  "autoupdate": false,
  "share": "disabled",
  "snapshot": false,
  "model": "anthropic/claude-sonnet-4-5",
  "provider": {
    "anthropic": { "options": { "baseURL": "$r/anthropic/v1",
                                "apiKey": "$warm_key" } },
    "openai": { "options": { "baseURL": "$r/openai/v1",
                             "apiKey": "$warm_key" } },
    "google": { "options": { "baseURL": "$r/google/v1beta",
                             "apiKey": "$warm_key" } }
  }
}
JSON
    perl /usr/local/lib/smcp/key-relay "$warm_relay_port" "$warm_egress" \
        "$warm_key" "$warm/token" < /dev/null > "$warm/relay.log" 2>&1 &
    relay=$!
    for n in $(compgen -e); do
        warm_env0[$n]=${!n}
    done
    mkdir "$warm/w"
    (cd "$warm/w" && BASH_ENV=$warm/env exec opencode serve \
        --hostname 127.0.0.1 --port "$warm_port") \
        < /dev/null > "$warm/server.log" 2>&1 &
    # (nothing waits for the relay or the server: disowned, bash says
    # nothing on stderr, the run's, of one the agent kills)
    disown "$relay" $! 2>/dev/null || true
    # the warm-up: one prompt (the relay's 401 ends it), its session
    # deleted; then $warm/ready.  Held for a session, in the directory its
    # last run worked in (the repository is there: OpenCode's instance of
    # it, seconds to make, is made now, as the follow-up will find it)
    # A new session's, in $repo, where its first repository is cloned:
    # an empty repository there now, which the handover removes before
    # the clone (warm_blank)
    local d=$warm/w
    if [ $warm_hold = 1 ]; then
        d=$(oc_dir_read)
        if [[ ! $d =~ ^/workspace/[A-Za-z0-9._/-]+$ ]] || [[ $d == *..* ]] \
           || [ ! -d "$d" ] || [ -L "$d" ]; then
            d=$warm/w
        fi
    elif git init --quiet "$repo" > /dev/null 2>&1; then
        d=$repo
        warm_blank=1
    fi
    (
        u=http://127.0.0.1:$warm_port q="directory=$d" sid=""
        for _ in $(seq 1 240); do
            curl -sf -m 1 -o /dev/null "$u/global/health" && break
            sleep 0.25
        done
        # (a repository's instance is made by the first request that names
        # its directory: seconds, more on a loaded machine)
        sid=$(curl -sf -m 60 -X POST -H 'Content-Type: application/json' \
                  --data '{}' "$u/session?$q" \
              | grep -o '"id":"ses_[A-Za-z0-9]*"' | head -n 1 | cut -d'"' -f4)
        if [ -n "$sid" ]; then
            curl -s -m 60 -o /dev/null -X POST \
                -H 'Content-Type: application/json' \
                --data '{"model":{"providerID":"anthropic","modelID":"claude-sonnet-4-5"},"parts":[{"type":"text","text":"warm-up"}]}' \
                "$u/session/$sid/message?$q"
            curl -s -m 10 -o /dev/null -X DELETE "$u/session/$sid?$q"
        fi
        # a warm-up that failed leaves a server that answers: still
        # warmer than a cold start (warm_take asks it again)
        curl -sf -m 5 -o /dev/null "$u/global/health" || exit 1
        touch "$warm/ready"
    ) < /dev/null > "$warm/warmup.log" 2>&1 &
}

# at the handover: 0 when the warm server serves this run (warm-up done,
# within 120 s if still under way, and healthy within 9 s; a provider it
# warmed, the default base URL, the egress it relays to, no command
# given; a new session, or the session whose workspace it was held on),
# else everything of it is killed and the run starts OpenCode cold
warm_take() {
    local p=${SMCP_MODEL:-anthropic/claude-sonnet-4-5} i
    p=${p%%/*}
    if [ -n "$warm_egress" ] && [ $# -eq 0 ] \
       && [ -z "${SMCP_PROVIDER_BASE_URL:-}" ] && [ -z "${SMCP_AGENT:-}" ] \
       && { [ -z "${SMCP_SESSION:-}" ] || [ $warm_hold = 1 ]; } \
       && [ "${SMCP_EGRESS_URL%/}" = "$warm_egress" ] \
       && [[ " $warm_providers " == *" $p "* ]]; then
        for ((i = 0; i < 2400; i++)); do
            [ -e "$warm/ready" ] && break
            read -r -t 0.05 -u 9 _ || true
        done
        # healthy: asked three times, 3 s each (a loaded machine starves
        # the idle server; a cold start costs more than the wait)
        if [ -e "$warm/ready" ]; then
            for ((i = 0; i < 3; i++)); do
                curl -sf -m 3 -o /dev/null \
                    "http://127.0.0.1:$warm_port/global/health" && return 0
            done
        fi
    fi
    if [ -n "$warm_egress" ]; then
        kill -KILL -1 2>/dev/null || true
        warm_egress=""
    fi
    return 1
}

# A pooled sandbox (SMCP_POOL=1, the runner's --pool) starts with nothing
# of a run: it waits, silent, until a run takes it.  One held for a
# session's next run (SMCP_HOLD=1 too, the runner's --session-hold) is
# made on the session's workspace once a run of it ends, and its warm
# server continues the session's OpenCode session.  The runner writes the
# run's environment on stdin ("NAME=value" entries, NUL after each, then
# an empty one: the end), which it closes after: a read blocked until
# then, no poll, and nothing in the workspace (where an agent wrote
# before) is read as a run.  Only SMCP_* names are taken, as values
# (nothing is evaluated); a hand-over without its end (the runner died
# writing it, someone else attached) is no run: it exits, silent.
warm_run=0
warm_hold=0
if [ "${SMCP_POOL:-}" = 1 ]; then
    [ "${SMCP_HOLD:-}" = 1 ] && warm_hold=1
    unset SMCP_POOL SMCP_HOLD
    warm_start
    handed=0
    while IFS= read -r -d '' kv; do
        if [ -z "$kv" ]; then
            handed=1
            break
        fi
        if [[ $kv =~ ^SMCP_[A-Z_]+= ]] && [[ ! $kv =~ ^SMCP_(POOL|HOLD)= ]]
        then
            export "${kv?}"
        fi
    done
    exec < /dev/null
    [ $handed = 1 ] || exit 1
    # the warm-up's empty repository goes: $repo is an empty directory
    # again, which the run's clone (or git init) fills as without it
    [ $warm_blank = 1 ] && rm -rf "$repo/.git"
    exec 9<> <(:)
    if warm_take "$@"; then
        warm_run=1
    fi
    exec 9<&-
fi

: "${SMCP_EGRESS_URL:?SMCP_EGRESS_URL is not set}"
: "${SMCP_RUN_TOKEN:?SMCP_RUN_TOKEN is not set}"
: "${SMCP_MODEL:=anthropic/claude-sonnet-4-5}"
: "${SMCP_GIT_HOST:=github.com}"

provider=${SMCP_MODEL%%/*}
model=${SMCP_MODEL#*/}
# the model as OpenCode is told (differs only for the gateway)
oc_model=$SMCP_MODEL
gateway_unsupported=""
case $provider in
    google) default_base=$SMCP_EGRESS_URL/google/v1beta ;;
    azure)  default_base=$SMCP_EGRESS_URL/azure/openai/v1 ;;
    # Cloudflare AI Gateway the way Cloudflare's guide for OpenCode sets it
    # up: the vendor's own OpenCode provider, pointed at the gateway's
    # endpoint for that vendor (the egress route /cloudflare/ is the
    # gateway, https://gateway.ai.cloudflare.com/v1/ACCOUNT/GATEWAY, and
    # sends the gateway token).  OpenCode's cloudflare-ai-gateway provider
    # would send "anthropic/claude-..." as the model name to the vendor's
    # endpoint, or, without a base URL, talk to gateway.ai.cloudflare.com
    # itself.
    cloudflare-ai-gateway)
        vendor=${model%%/*}
        model=${model#*/}
        case $vendor in
            anthropic) provider=anthropic
                       default_base=$SMCP_EGRESS_URL/cloudflare/anthropic/v1 ;;
            openai)    provider=openai
                       default_base=$SMCP_EGRESS_URL/cloudflare/openai ;;
            google-ai-studio)
                       provider=google
                       default_base=$SMCP_EGRESS_URL/cloudflare/google-ai-studio/v1beta ;;
            *)         gateway_unsupported=$vendor
                       default_base=$SMCP_EGRESS_URL/cloudflare ;;
        esac
        oc_model=$provider/$model ;;
    *)      default_base=$SMCP_EGRESS_URL/$provider/v1 ;;
esac
base_url=${SMCP_PROVIDER_BASE_URL:-$default_base}


# JSON string literal of stdin's bytes (no jq in the image): control
# characters escaped, invalid UTF-8 bytes replaced by U+FFFD, so a runner's
# strict JSON parser accepts any diff or message.  perl-base is Essential
# in Debian; the bash fallback handles only the control characters.
# shellcheck disable=SC2016
json_perl='binmode STDIN; binmode STDOUT; local $/; my $s = <STDIN>;
$s = "" unless defined $s;
my %e = ("\"" => "\\\"", "\\" => "\\\\", "\n" => "\\n", "\r" => "\\r", "\t" => "\\t");
$s =~ s{([\x00-\x1f"\\\x7f])|([\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2})|([\x80-\xff])}{defined $1 ? ($e{$1} // sprintf("\\u%04x", ord $1)) : defined $2 ? $2 : "\\ufffd"}ge;
print "\"", $s, "\"";'

json_stdin() {
    if command -v perl >/dev/null 2>&1; then
        perl -e "$json_perl"
    else
        local s c i
        s=$(cat; printf x); s=${s%x}
        s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\n'/\\n}; s=${s//$'\r'/\\r}
        s=${s//$'\t'/\\t}
        for i in $(seq 1 31); do
            # shellcheck disable=SC2059
            printf -v c "\\x$(printf %02x "$i")"
            s=${s//"$c"/$(printf '\\u%04x' "$i")}
        done
        printf '"%s"' "$s"
    fi
}

json_str() { printf '%s' "$1" | json_stdin; }
# json_word VAR WORD: the same into VAR, without a process for a word that
# needs no escape (a provider's or model's name); anything else through
# json_str
json_word() {
    if [[ $2 =~ ^[A-Za-z0-9._:/@+-]*$ ]]; then
        printf -v "$1" '"%s"' "$2"
    else
        printf -v "$1" '%s' "$(json_str "$2")"
    fi
}

# the diff line from the diff on stdin: whole diff lines, encoded as
# json_stdin does, as many as fit in SMCP_DIFF_MAX bytes (newline
# included); read in bounded chunks, so a huge diff costs no memory
# shellcheck disable=SC2016
diff_perl='binmode STDIN; binmode STDOUT;
my $max = ($ENV{SMCP_DIFF_MAX} // "") =~ /^([0-9]{1,12})$/ ? $1 : 10485760;
my %e = ("\"" => "\\\"", "\\" => "\\\\", "\n" => "\\n", "\r" => "\\r", "\t" => "\\t");
sub enc { my $s = shift;
$s =~ s{([\x00-\x1f"\\\x7f])|([\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2})|([\x80-\xff])}{defined $1 ? ($e{$1} // sprintf("\\u%04x", ord $1)) : defined $2 ? $2 : "\\ufffd"}ge;
return $s }
my ($pre, $end, $tend) = (q({"type":"smcp","step":"diff","diff":"), qq("}\n), qq(","truncated":true}\n));
my $room = $max - length($pre) - length($tend);
my ($out, $pend, $cut) = ("", "", 0);
READ: while (1) {
    my $n = read(STDIN, my $buf, 65536);
    $pend .= $buf if $n;
    while ((my $i = index($pend, "\n")) >= 0) {
        my $x = enc(substr($pend, 0, $i + 1, ""));
        if (length($out) + length($x) > $room) { $cut = 1; last READ }
        $out .= $x;
    }
    if (!$n) {
        if (length $pend) {
            my $x = enc($pend);
            if (length($out) + length($x) > $room) { $cut = 1 } else { $out .= $x }
        }
        last;
    }
    if (length($pend) > $max) { $cut = 1; last }
}
print $pre, $out, $cut ? $tend : $end;'

diff_line() {
    if command -v perl >/dev/null 2>&1; then
        perl -e "$diff_perl" < "$1"
        return
    fi
    # no perl: the raw diff cut so that even escaped it fits (6 bytes per
    # byte at worst), at a line boundary
    local max=${SMCP_DIFF_MAX:-10485760} size limit cut
    size=$(wc -c < "$1")
    limit=$(( (max - 100) / 6 ))
    if [ "$size" -le "$limit" ]; then
        printf '{"type":"smcp","step":"diff","diff":%s}\n' "$(json_stdin < "$1")"
    else
        cut=$(mktemp)
        head -c "$limit" "$1" | sed '$d' > "$cut"
        printf '{"type":"smcp","step":"diff","diff":%s,"truncated":true}\n' \
            "$(json_stdin < "$cut")"
        rm -f "$cut"
    fi
}

# PATH without the directories the agent could have written to: an entry
# that is, or is under, a directory this user owns or may write (the
# workspace, $HOME, /tmp, or an image's ENV PATH=$HOME/.local/bin:...);
# once the agent is gone, no command is taken from where it may have put
# one (builtins only: nothing is looked up on PATH before it is cleaned)
path_not_writable() {
    local d p ok out="" parts
    IFS=: read -ra parts <<< "$PATH"
    for d in "${parts[@]}"; do
        [[ $d == /* ]] || continue
        p=$d ok=1
        while :; do
            if [ -e "$p" ] && { [ -w "$p" ] || [ -O "$p" ]; }; then
                ok=0
                break
            fi
            [ "$p" = / ] && break
            p=${p%/*}
            p=${p:-/}
        done
        [ $ok = 1 ] && out=${out:+$out:}$d
    done
    printf '%s' "$out"
}

lifecycle() {
    # one JSON line on stdout, beside OpenCode's own events
    printf '{"type":"smcp","step":"%s"%s}\n' "$1" "${2:+,$2}"
}

# OpenCode: the provider points at the egress route; its "key" is the run
# token.  A custom OpenAI-compatible provider needs its package and model
# declared; an Azure model is a deployment name, unknown to OpenCode's
# bundled model list, so it is declared too.
provider_extra=""
case $provider in
    compat)
        provider_extra=$(printf ',"npm":"@ai-sdk/openai-compatible","name":"compat","models":{%s:{}}' \
                         "$(json_str "$model")") ;;
    azure)
        provider_extra=$(printf ',"models":{%s:{}}' "$(json_str "$model")") ;;
esac

# (a warm run keeps the warm server's configuration: its providers
# reach the egress through the relay, which adds the token)
if [ $warm_run = 0 ]; then
cat > "$XDG_CONFIG_HOME/opencode/opencode.json" <<JSON
{
  "\$schema": "https://opencode.ai/config.json",
  "autoupdate": false,
  "share": "disabled",
  "snapshot": false,
  "model": $(json_str "$oc_model"),
  "small_model": $(json_str "$oc_model"),
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
fi

# git: the git host is reached through the proxy, which adds the real
# token; the sandbox authenticates with its run token
basic=$(printf 'x-access-token:%s' "$SMCP_RUN_TOKEN" | base64 -w0)
# (written as `git config --global` would write these six, without six
# processes: on a held sandbox's follow-up they were a fifth of its time to
# the first model request; a value with a line break, which a quoted
# subsection cannot hold, goes through git config itself)
git_globals() {
    local u=$SMCP_EGRESS_URL/github/ h=$SMCP_EGRESS_URL/ n v
    local -a vals=("https://$SMCP_GIT_HOST/" "Authorization: Basic $basic"
                   "${SMCP_GIT_AUTHOR_NAME:-OpenCode sandbox}"
                   "${SMCP_GIT_AUTHOR_EMAIL:-sandbox@localhost}" main "$repo")
    if [[ $u$h${vals[*]} == *[$'\n\r']* ]]; then
        git config --global url."$u".insteadOf "${vals[0]}"
        git config --global http."$h".extraHeader "${vals[1]}"
        git config --global user.name "${vals[2]}"
        git config --global user.email "${vals[3]}"
        git config --global init.defaultBranch main
        git config --global safe.directory "$repo"
        return
    fi
    # as git writes them: a subsection quoted, a backslash and a double
    # quote escaped; a value's tab as \t, and the value quoted when it
    # begins or ends with a space or holds a ";" or "#"
    for n in u h; do
        v=${!n//\\/\\\\}; printf -v "$n" '"%s"' "${v//\"/\\\"}"
    done
    for n in "${!vals[@]}"; do
        v=${vals[n]//\\/\\\\}; v=${v//\"/\\\"}; v=${v//$'\t'/\\t}
        if [[ ${vals[n]} == \ * || ${vals[n]} == *\  || ${vals[n]} == *[\;#]* ]]
        then
            v=\"$v\"
        fi
        vals[n]=$v
    done
    printf '[url %s]\n\tinsteadOf = %s\n[http %s]\n\textraHeader = %s\n[user]\n\tname = %s\n\temail = %s\n[init]\n\tdefaultBranch = %s\n[safe]\n\tdirectory = %s\n' \
        "$u" "${vals[0]}" "$h" "${vals[1]}" "${vals[2]}" "${vals[3]}" \
        "${vals[4]}" "${vals[5]}" > "$HOME/.gitconfig"
}
git_globals

# package registries through the egress: npm, pip, Go, cargo, Maven, gem,
# apt (registries.sh)
. /usr/local/lib/smcp/registries.sh
# the git steps after the agent (git-after.sh: functions only)
# shellcheck source=runner/sandbox/git-after.sh
. /usr/local/lib/smcp/git-after.sh
# the agents besides OpenCode (agents.sh: functions only)
# shellcheck source=runner/sandbox/agents.sh
. /usr/local/lib/smcp/agents.sh

if [ $# -gt 0 ]; then
    exec "$@"
fi

# a model this sandbox cannot configure: the run fails saying why (an
# error line as OpenCode prints them; the runner takes its message)
if [ -n "$gateway_unsupported" ]; then
    printf '{"type":"error","error":{"name":"ConfigError","data":{"message":%s}}}\n' \
        "$(json_str "model $SMCP_MODEL: Cloudflare AI Gateway vendor '$gateway_unsupported' is not supported (anthropic, openai, google-ai-studio)")"
    exit 2
fi

# A cold run's OpenCode server (no warm one serves it): begun as soon as
# the run's configuration is written (cold_begin), so that OpenCode starts
# while the repository is cloned, on 127.0.0.1:$cold_port (not the warm
# port: a warm server just killed may still hold it), in a directory of its
# own ($warm/c) as a warm server is.  It has the run's configuration (the
# token in it, as `opencode run` has); its tools get the environment
# exported since it started through BASH_ENV ($warm/env, warm_env).
# cold_server waits for it to answer as long as it runs (a loaded machine
# takes a minute to start OpenCode; the run's deadline bounds it), at most
# 10 min: 0 when it answers, else it is killed and the run is `opencode
# run` (1).  (Its first prompt costs seconds more than `opencode run`'s
# does: docs/contracts.md, "Warm pool".)
cold_port=4098
cold_pid=""
cold_begin() {
    local n
    command -v perl >/dev/null 2>&1 && command -v curl >/dev/null 2>&1 \
        || return 0
    # (a pooled sandbox's warm server was killed: its directory stays)
    [ -d "$warm" ] || mkdir -m 0700 "$warm" || return 0
    mkdir -p "$warm/c" || return 0
    warm_env0=()
    for n in $(compgen -e); do
        warm_env0[$n]=${!n}
    done
    (cd "$warm/c" && BASH_ENV=$warm/env exec opencode serve \
        --hostname 127.0.0.1 --port "$cold_port") \
        < /dev/null > "$warm/cold.log" 2>&1 &
    cold_pid=$!
}

cold_server() {
    local i
    [ -n "$cold_pid" ] || return 1
    for ((i = 0; i < 6000; i++)); do
        if curl -sf -m 2 -o /dev/null \
               "http://127.0.0.1:$cold_port/global/health"; then
            # (not waited for from here: bash says nothing of it on the
            # run's stderr if the agent kills it)
            disown "$cold_pid" 2>/dev/null || true
            oc_port=$cold_port
            warm_env
            return 0
        fi
        kill -0 "$cold_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$cold_pid" 2>/dev/null || true
    wait "$cold_pid" 2>/dev/null || true
    return 1
}

if [ $warm_run = 0 ] && [ -z "${SMCP_AGENT:-}" ]; then
    cold_begin
fi

# git's last words on stderr (the file it went to), for a lifecycle line
# (bounded)
git_words() { tail -c 2000 "$1" | json_stdin; }

# repo_dir URL: where a repository of the session lives: /workspace/repo
# for the session's first (or whichever repository is there already),
# else /workspace/repo-<owner>-<name>
repo_dir() {
    local url=$1 path owner name
    if [ "$(git -C "$repo" config --get remote.origin.url 2>/dev/null)" = "$url" ]; then
        printf '%s' "$repo"; return
    fi
    if [ ! -d "$repo/.git" ] && [ "$url" = "$first_repo" ]; then
        printf '%s' "$repo"; return
    fi
    path=${url#https://*/}
    path=${path%.git}
    owner=${path%%/*}
    name=${path#*/}
    owner=${owner//[^A-Za-z0-9_.-]/_}
    name=${name//[^A-Za-z0-9_.-]/_}
    printf '%s' "$ws/repo-$owner-$name"
}

# sync_repo URL DIR [BRANCH]: cloned (BRANCH checked out) when missing,
# fetched when present (a failed fetch is said, not fatal)
sync_repo() {
    local url=$1 dir=$2 branch=${3:-}
    [ "$dir" = "$repo" ] || git config --global --add safe.directory "$dir"
    if [ ! -d "$dir/.git" ]; then
        lifecycle clone "\"repository\":$(json_str "$url")"
        if ! git clone --quiet ${branch:+--branch "$branch"} "$url" "$dir" \
                 2>"$TMPDIR/git.err"; then
            lifecycle clone_failed "\"message\":$(git_words "$TMPDIR/git.err")"
            return 1
        fi
        return 0
    fi
    lifecycle fetch "\"repository\":$(json_str "$url")"
    if ! git -C "$dir" fetch --quiet origin 2>"$TMPDIR/git.err"; then
        lifecycle fetch_failed "\"repository\":$(json_str "$url"),\"message\":$(git_words "$TMPDIR/git.err")"
    fi
}

# on_branch DIR NAME: a follow-up's branch checked out: the local one, else
# the remote's, else a new one from HEAD
on_branch() {
    local dir=$1 name=$2 created=false
    if [ "$(git -C "$dir" symbolic-ref -q --short HEAD 2>/dev/null)" = "$name" ]; then
        :
    elif git -C "$dir" show-ref -q --verify "refs/heads/$name"; then
        git -C "$dir" checkout -q "$name" 2>"$TMPDIR/git.err" || return 1
    elif git -C "$dir" show-ref -q --verify "refs/remotes/origin/$name"; then
        git -C "$dir" checkout -q -b "$name" --track "origin/$name" \
            2>"$TMPDIR/git.err" || return 1
    else
        git -C "$dir" checkout -q -b "$name" 2>"$TMPDIR/git.err" || return 1
        created=true
    fi
    lifecycle branch "\"name\":$(json_str "$name"),\"created\":$created"
}

repos=${SMCP_REPOSITORIES:-${SMCP_REPOSITORY:-}}
first_repo=${repos%% *}
own=$repo
for url in $repos; do
    dir=$(repo_dir "$url")
    existed=0
    [ -d "$dir/.git" ] && existed=1
    if [ "$url" = "${SMCP_REPOSITORY:-}" ]; then
        own=$dir
        sync_repo "$url" "$dir" "${SMCP_BRANCH:-}" || exit 3
        if [ -n "${SMCP_BRANCH:-}" ] && [ $existed = 1 ]; then
            if ! on_branch "$dir" "$SMCP_BRANCH"; then
                lifecycle branch_failed "\"name\":$(json_str "$SMCP_BRANCH"),\"message\":$(git_words "$TMPDIR/git.err")"
                exit 3
            fi
        fi
    else
        # another repository of the session: beside, for the agent to read
        sync_repo "$url" "$dir" || true
    fi
done
if [ -n "${SMCP_REPOSITORY:-}" ] && [ "$own" = "$repo" ] \
   && [ ! -d "$repo/.git" ]; then
    # the run's own repository missing from SMCP_REPOSITORIES
    own=$(repo_dir "$SMCP_REPOSITORY")
    sync_repo "$SMCP_REPOSITORY" "$own" "${SMCP_BRANCH:-}" || exit 3
fi
if [ ! -d "$own/.git" ]; then
    git -C "$own" init --quiet
fi

cd "$own"

# the run's diff is taken against where this run started (commits the agent
# makes are part of it); an empty tree when the repository has no commit yet
start=$(git rev-parse -q --verify 'HEAD^{commit}' 2>/dev/null \
        || git hash-object -t tree /dev/null)

# the task's first non-blank line, blanks squeezed, 80 characters: a new
# session's default title, and the pull request commit's subject
first_line=$(printf '%s\n' "${SMCP_TASK:-}" | sed -n '/[^[:space:]]/{s/[[:space:]]\{1,\}/ /g;s/^ //;s/ $//;p;q}')
first_line=$(LC_ALL=C.UTF-8; printf '%s' "${first_line:0:80}")

# the warm server's run: its tools' environment (BASH_ENV: what was
# exported since the server started, as a cold agent inherits it) and the
# token for the relay, files only this user reads, on the tmpfs
warm_env() {
    (
        umask 077
        for n in $(compgen -e); do
            case $n in PWD|OLDPWD|SHLVL|_) continue ;; esac
            if [ "${warm_env0[$n]+set}" != set ] \
               || [ "${warm_env0[$n]}" != "${!n}" ]; then
                declare -p "$n"
            fi
        done > "$warm/env"
    )
}

warm_handover() {
    warm_env
    (umask 077; printf '%s' "$SMCP_RUN_TOKEN" > "$warm/token")
}

# Made on the warm-up's empty repository, the server's instance of $repo
# has not read what the clone brought of OpenCode's own configuration
# (read when an instance is made; AGENTS.md is read at each prompt): for a
# repository that has some, the server drops that instance (asked up to
# three times), and the prompt makes it anew as a cold run's does
warm_fresh() {
    local f i
    [ $warm_blank = 1 ] && [ "$own" = "$repo" ] || return 0
    for f in opencode.json opencode.jsonc .opencode; do
        [ -e "$repo/$f" ] || [ -L "$repo/$f" ] || continue
        for ((i = 0; i < 3; i++)); do
            curl -sf -m 20 -o /dev/null -X POST \
                "http://127.0.0.1:$warm_port/instance/dispose?directory=$repo" \
                && return 0
        done
        return 0
    done
}

# the run's session: the one it continues, or a new one made as `opencode
# run --auto` makes it (the title, the permissions it denies); its lines
# come from the server's events (session-events), subscribed before the
# prompt is sent (the first event, server.connected, read first)
server_session() {
    if [ -n "$session_id" ]; then
        sid=$session_id
    else
        sid=$(printf '{%s"permission":[%s,%s,%s]}' \
                  "${title:+\"title\":$(json_str "$title"),}" \
                  '{"permission":"question","action":"deny","pattern":"*"}' \
                  '{"permission":"plan_enter","action":"deny","pattern":"*"}' \
                  '{"permission":"plan_exit","action":"deny","pattern":"*"}' \
              | curl -sf -m 30 -X POST -H 'Content-Type: application/json' \
                    --data-binary @- "$oc_url/session?$oc_q" \
              | grep -o '"id":"ses_[A-Za-z0-9]*"' | head -n 1 \
              | cut -d'"' -f4) || true
    fi
    mkfifo -m 0600 "$warm/events"
    curl -sN "$oc_url/event?$oc_q" > "$warm/events" 2>/dev/null &
    exec 8< "$warm/events"
    IFS= read -r -t 10 -u 8 _ || true
    if [ -n "$sid" ]; then
        perl /usr/local/lib/smcp/session-events "$sid" "$oc_port" "$own" \
            <&8 &
        reader=$!
    fi
    exec 8<&-
}

# the prompt (the model, the task) through the server; then the mailman
server_prompt() {
    json_word oc_pj "${oc_model%%/*}"
    json_word oc_mj "${oc_model#*/}"
    printf '{"model":{"providerID":%s,"modelID":%s},"parts":[{"type":"text","text":%s}]}' \
        "$oc_pj" "$oc_mj" "$(json_stdin < "$TMPDIR/smcp-task")" > "$warm/prompt"
    if [ -z "$sid" ]; then
        # no session: said as OpenCode's client says it
        printf '{"type":"error","error":{"name":"UnknownError","data":{"message":"OpenCode server: the session could not be created"}}}\n'
        false &
        return
    fi
    curl -s -o "$warm/answer" -w '%{http_code}' -X POST \
        -H 'Content-Type: application/json' --data-binary "@$warm/prompt" \
        "$oc_url/session/$sid/message?$oc_q" > "$warm/status" 2>/dev/null &
    prompt=$!
    mailman < /dev/null > /dev/null 2>&1 &
    mailman=$!
    # the prompt's request is the agent (wait, signals)
    set_agent=$prompt
}

# The mailman: while the agent runs, the messages sent to it, taken one by
# one from the egress inbox (GET $SMCP_EGRESS_URL/smcp/inbox with the run
# token: 200 and the text, or 204), each added to the session with the
# run's model (prompt_async: OpenCode queues it and sends it with the
# session's next model request, within the prompt's turn).  Asked every
# second (the server is not asked anything until a message comes); an
# egress without an inbox (404) ends it, and so does $warm/mail-stop, made
# once the prompt has returned: what it took it hands on before it stops.
# Nothing of it is printed.
mailman() {
    local code
    while [ ! -e "$warm/mail-stop" ]; do
        code=$(curl -s -m 5 -o "$warm/inbox" -w '%{http_code}' \
                   -H "Authorization: Bearer $SMCP_RUN_TOKEN" \
                   "${SMCP_EGRESS_URL%/}/smcp/inbox") || code=000
        case $code in
            200)
                printf '{"model":{"providerID":%s,"modelID":%s},"parts":[{"type":"text","text":%s}]}' \
                    "$oc_pj" "$oc_mj" \
                    "$(json_stdin < "$warm/inbox")" > "$warm/steer"
                curl -s -m 10 -o /dev/null -X POST \
                    -H 'Content-Type: application/json' \
                    --data-binary "@$warm/steer" \
                    "$oc_url/session/$sid/prompt_async?$oc_q"
                continue ;;
            404) return 0 ;;
        esac
        sleep 1
    done
}

# OpenCode keeps a session per project (the repository it runs in): the
# session's conversation goes on only in the directory it was started in;
# a run in another repository of the session starts a new one
oc_dir_file=$oc/smcp/oc-dir
oc_dir=$(oc_dir_read)
[ -n "$oc_dir" ] || oc_dir=$repo
args=(run --format json --auto --model "$oc_model")
session_id=""
if [ -n "${SMCP_SESSION:-}" ] && [ "$oc_dir" = "$own" ]; then
    args+=(--session "$SMCP_SESSION")
    session_id=$SMCP_SESSION
else
    # written anew (not through whatever the agent left there)
    rm -rf "$oc_dir_file" 2>/dev/null || true
    printf '%s' "$own" > "$oc_dir_file"
    title=${SMCP_TITLE:-$first_line}
    [ -n "$title" ] && args+=(--title "$title")
fi

# How the agent runs: through an OpenCode server, prompted over its HTTP
# API as `opencode run --auto` prompts it, its lines printed from the
# server's events by session-events; there a message sent to the running
# agent (opencode_send_message) reaches it: the mailman takes each one
# from the egress inbox and adds it to the session, and OpenCode sends it
# with the session's next model request.  A warm run (a pooled or held
# sandbox's) uses the warm server; a cold run starts one (cold_server).
# Only when no server can serve it (no perl or curl in an image built on
# this one, a server that does not start) is it `opencode run`, which no
# message reaches; a command given as arguments runs as it is.  The task
# goes through a file (`opencode run` reads it on stdin until EOF).
# The agent runs in the background so that a stop signal reaches it (bash
# as PID 1 would otherwise ignore SIGTERM, and under an init the signal
# would end only this script).
printf '%s' "${SMCP_TASK:-}" > "$TMPDIR/smcp-task"
signal=""
reader=""
mailman=""
set_agent=""
sid=""
oc_url=""
oc_pj="" oc_mj=""
oc_q="directory=$own"
mapper_pid=""
if [ -n "${SMCP_AGENT:-}" ]; then
    # another agent (agents.sh); its conversation goes on in the directory
    # it began in, as OpenCode's
    lifecycle agent_start
    if agent_other_start; then
        set_agent=$agent_pid
    else
        false &
    fi
elif [ $warm_run = 1 ]; then
    warm_fresh
    warm_handover
    oc_port=$warm_port oc_url=http://127.0.0.1:$warm_port
    lifecycle agent_start '"warm":true'
    server_session
    server_prompt
elif cold_server; then
    oc_url=http://127.0.0.1:$oc_port
    lifecycle agent_start
    server_session
    server_prompt
else
    lifecycle agent_start
    opencode "${args[@]}" < "$TMPDIR/smcp-task" &
fi
agent=${set_agent:-$!}
for sig in TERM INT HUP; do
    # shellcheck disable=SC2064
    trap "signal=$sig; kill -$sig $agent 2>/dev/null || true" "$sig"
done
status=0
wait "$agent" || status=$?
# a trapped signal ends `wait` early: wait for OpenCode itself
while kill -0 "$agent" 2>/dev/null; do
    status=0
    wait "$agent" || status=$?
done
trap - TERM INT HUP
if [ -n "$mapper_pid" ]; then
    # the map prints the agent's last lines once their pipe closes (a
    # process the agent left holding it is killed below: not waited for
    # longer than 5 s)
    for ((i = 0; i < 100; i++)); do
        kill -0 "$mapper_pid" 2>/dev/null || break
        sleep 0.05
    done
fi
if [ -n "$mailman" ]; then
    # no message is taken once the prompt has returned; one taken is
    # handed on first (its requests are bounded: 20 s at most; after a stop
    # signal it is not waited for; bash's word of a job it killed goes to
    # /dev/null: the container's output is the run's)
    touch "$warm/mail-stop"
    for ((i = 0; i < 200; i++)); do
        [ -z "$signal" ] && kill -0 "$mailman" 2>/dev/null || break
        sleep 0.1
    done
    kill "$mailman" 2>/dev/null || true
    wait "$mailman" 2>/dev/null || true
fi
if [ -n "$reader" ]; then
    # the session's last events (its idle status) follow the client's
    # return; not waited for after a stop signal
    for ((i = 0; i < 200; i++)); do
        [ -z "$signal" ] && kill -0 "$reader" 2>/dev/null || break
        sleep 0.05
    done
    kill "$reader" 2>/dev/null || true
    rstatus=0
    wait "$reader" 2>/dev/null || rstatus=$?
    if [ "$status" = 0 ] && [ "$rstatus" = 1 ]; then
        status=1
    fi
fi
# (read by bash itself: no program runs here before PATH is made safe
# below, when the agent was `opencode run`)
code=""
if [ -n "$oc_url" ]; then
    IFS= read -r -n 3 code < "$warm/status" 2>/dev/null || true
fi
if [ -n "$oc_url" ] && [ -z "$signal" ] && [ -n "$sid" ] \
   && [[ $code =~ ^[13-5][0-9][0-9]$ ]]; then
    # the prompt refused (a model unknown to OpenCode...): its answer as
    # the client prints it.  A server that never answered (000: it died,
    # its agent killed it) is a dead agent: the exit status is curl's and
    # the runner tells it with the last words on stderr, as of a dead
    # `opencode run`.
    answer=$(head -c 4000 "$warm/answer" 2>/dev/null || true)
    printf '{"type":"error","timestamp":%s,"sessionID":"%s","error":{"name":"APIError","data":{"message":%s}}}\n' \
        "$(date +%s%3N)" "$sid" \
        "$(printf '%s' "${answer:-the OpenCode server answered HTTP $code}" \
           | json_stdin)"
    status=1
fi
# whatever the agent left running goes now (kill -1: every process but the
# init and this script): from here on only this script writes to the
# container's output, so the lines the runner trusts, those after the last
# agent_exit (push, pull request, diff), cannot be forged by a process of
# the agent writing to /proc/1/fd/1
# (its jobs disowned first: bash would say "Killed" of each on stderr)
disown -a 2>/dev/null || true
kill -KILL -1 2>/dev/null || true
PATH=$(path_not_writable)
hash -r
lifecycle agent_exit "\"exitCode\":$status${signal:+,\"signal\":\"$signal\"}"

# From here on no program or configuration of the agent's may run: every
# git step is git-after.sh's, in a git directory made now, with nothing of
# the agent's but its work tree (hashed here) and its objects (checked by
# their hashes).  The run's tree is taken once; the diff stored is the
# diff of the run's start and that tree, and the commit pushed has that
# tree.
tree_ok=0
diff_file=/dev/null
if git_after_tree 2>/dev/null; then
    tree_ok=1
    diff_file=$gsf/diff
fi

# the pull request's branch: what changed since the run started, the
# agent's own commits included, on opencode/<runId>, pushed through the
# egress git route (the only branch it lets this run write); the runner
# opens the pull request
if [ "$status" = 0 ] && [ -z "$signal" ] && [ "${SMCP_CREATE_PR:-}" = 1 ] \
   && [ -n "${SMCP_REPOSITORY:-}" ]; then
    pr_branch=opencode/${SMCP_RUN_ID:-run}
    subject=${SMCP_TITLE:-$first_line}
    if [ $tree_ok = 1 ]; then
        git_after_push "$pr_branch" "${subject:-sandbox-mcp run}" \
            "sandbox-mcp run ${SMCP_RUN_ID:-}" "$gsf/git.err" || true
        git_after_hand_back "$pr_branch" 2>/dev/null || true
    else
        lifecycle push_failed '"message":"the run'"'"'s tree could not be made from the work tree: nothing pushed"'
    fi
fi

# the diff, the run's last line: the runner stores it (a/ b/ prefixes, the
# runner's diff index reads them).  Through a file, not a shell variable:
# keeps the final newline (git apply needs it) and any byte.  The whole
# diff is left in $oc/smcp/diff by a rename (a symlink the agent left
# there, to the container's output say, is replaced, not written through).
diff_line "$diff_file"
mkdir -p "$oc/smcp" 2>/dev/null || true
gs_put "$diff_file" "$oc/smcp/diff" 2>/dev/null || true
git_after_done

exit $status
