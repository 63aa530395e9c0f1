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
#                          rest arrives when a run takes it (below)
#   SMCP_DIFF_MAX          bytes the diff line may take, newline included
#                          (default 10485760): a longer diff is cut at a
#                          line boundary and marked "truncated":true
#
# Output (stdout): OpenCode's JSON events, one per line, framed by lifecycle
# lines {"type":"smcp","step":...}: clone (repository) | clone_failed
# (message) | fetch (repository) | fetch_failed (repository, message) |
# branch (name, created) | branch_failed (name, message) | agent_start |
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
# only after the last agent_exit, which no agent process outlives.
#
# Layout of the session volume: /workspace/repo is the worktree,
# /workspace/.oc holds OpenCode's XDG dirs (kept apart from the worktree so
# they stay out of snapshots and diffs).
set -euo pipefail
umask 022

ws=/workspace
repo=$ws/repo
oc=$ws/.oc

# A pooled sandbox (SMCP_POOL=1, the runner's --pool) starts with nothing
# of a run: it waits, silent, until a run takes it.  The runner puts the
# run's environment in /workspace/.smcp-run ("NAME=value" entries, NUL
# after each), then /workspace/.smcp-ready; only SMCP_* names are taken,
# as values (nothing is evaluated), and both files go before anything
# else happens.  Polled every 10 ms without a process per poll (a read
# with a timeout on a pipe nobody writes).
if [ "${SMCP_POOL:-}" = 1 ]; then
    unset SMCP_POOL
    exec 9<> <(:)
    until [ -e $ws/.smcp-ready ]; do
        read -r -t 0.01 -u 9 _ || true
    done
    exec 9<&-
    while IFS= read -r -d '' kv; do
        if [[ $kv =~ ^SMCP_[A-Z_]+= ]] && [[ ! $kv =~ ^SMCP_POOL= ]]; then
            export "${kv?}"
        fi
    done < $ws/.smcp-run
    rm -f $ws/.smcp-run $ws/.smcp-ready
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

export HOME=${HOME:-/home/sandbox}
export XDG_CONFIG_HOME=$oc/config XDG_DATA_HOME=$oc/data
export XDG_CACHE_HOME=$oc/cache XDG_STATE_HOME=$oc/state
export TMPDIR=${TMPDIR:-/tmp}
export OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1
export OPENCODE_DISABLE_DEFAULT_PLUGINS=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1
export OPENCODE_DISABLE_SHARE=1 OPENCODE_DISABLE_CLAUDE_CODE=1
export OPENCODE_DISABLE_EXTERNAL_SKILLS=1

mkdir -p "$repo" "$XDG_CONFIG_HOME/opencode" "$XDG_DATA_HOME" \
         "$XDG_CACHE_HOME" "$XDG_STATE_HOME" "$HOME" "$oc/smcp"

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
    local max=${SMCP_DIFF_MAX:-10485760} size limit
    size=$(wc -c < "$1")
    limit=$(( (max - 100) / 6 ))
    if [ "$size" -le "$limit" ]; then
        printf '{"type":"smcp","step":"diff","diff":%s}\n' "$(json_stdin < "$1")"
    else
        head -c "$limit" "$1" | sed '$d' > "$TMPDIR/smcp-diff-cut"
        printf '{"type":"smcp","step":"diff","diff":%s,"truncated":true}\n' \
            "$(json_stdin < "$TMPDIR/smcp-diff-cut")"
    fi
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
git config --global user.name "${SMCP_GIT_AUTHOR_NAME:-OpenCode sandbox}"
git config --global user.email "${SMCP_GIT_AUTHOR_EMAIL:-sandbox@localhost}"
git config --global init.defaultBranch main
git config --global safe.directory "$repo"

# package registries through the egress: npm, pip, Go, cargo, Maven, gem,
# apt (registries.sh)
. /usr/local/lib/smcp/registries.sh

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

# git's last words on stderr, for a lifecycle line (bounded)
git_words() { tail -c 2000 "$TMPDIR/git.err" | json_stdin; }

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
            lifecycle clone_failed "\"message\":$(git_words)"
            return 1
        fi
        return 0
    fi
    lifecycle fetch "\"repository\":$(json_str "$url")"
    if ! git -C "$dir" fetch --quiet origin 2>"$TMPDIR/git.err"; then
        lifecycle fetch_failed "\"repository\":$(json_str "$url"),\"message\":$(git_words)"
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
                lifecycle branch_failed "\"name\":$(json_str "$SMCP_BRANCH"),\"message\":$(git_words)"
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

# OpenCode keeps a session per project (the repository it runs in): the
# session's conversation goes on only in the directory it was started in;
# a run in another repository of the session starts a new one
oc_dir_file=$oc/smcp/oc-dir
oc_dir=$(cat "$oc_dir_file" 2>/dev/null || printf '%s' "$repo")
args=(run --format json --auto --model "$oc_model")
if [ -n "${SMCP_SESSION:-}" ] && [ "$oc_dir" = "$own" ]; then
    args+=(--session "$SMCP_SESSION")
else
    printf '%s' "$own" > "$oc_dir_file"
    title=${SMCP_TITLE:-$first_line}
    [ -n "$title" ] && args+=(--title "$title")
fi

# OpenCode reads the task on stdin until EOF; it runs in the background so
# a stop signal reaches it (bash as PID 1 would otherwise ignore SIGTERM,
# and under an init the signal would end only this script)
printf '%s' "${SMCP_TASK:-}" > "$TMPDIR/smcp-task"
signal=""
lifecycle agent_start
opencode "${args[@]}" < "$TMPDIR/smcp-task" &
agent=$!
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
# whatever the agent left running goes now (kill -1: every process but the
# init and this script): from here on only this script writes to the
# container's output, so the lines the runner trusts, those after the last
# agent_exit (push, pull request, diff), cannot be forged by a process of
# the agent writing to /proc/1/fd/1
kill -KILL -1 2>/dev/null || true
lifecycle agent_exit "\"exitCode\":$status${signal:+,\"signal\":\"$signal\"}"

# the pull request's branch: what changed since the run started, the
# agent's own commits included, on opencode/<runId>, pushed through the
# egress git route (the only branch it lets this run write); the runner
# opens the pull request
if [ "$status" = 0 ] && [ -z "$signal" ] && [ "${SMCP_CREATE_PR:-}" = 1 ] \
   && [ -n "${SMCP_REPOSITORY:-}" ]; then
    pr_branch=opencode/${SMCP_RUN_ID:-run}
    git -c core.fsmonitor= add -A . >/dev/null 2>&1 || true
    if git -c core.fsmonitor= diff --cached --quiet "$start" 2>/dev/null; then
        git reset -q >/dev/null 2>&1 || true
        lifecycle pr_skipped '"reason":"no changes"'
    else
        git checkout -q -B "$pr_branch" 2>/dev/null || true
        if ! git diff --cached --quiet 2>/dev/null; then
            subject=${SMCP_TITLE:-$first_line}
            git -c core.hooksPath=/dev/null commit -q --no-verify \
                -m "${subject:-sandbox-mcp run}" \
                -m "sandbox-mcp run ${SMCP_RUN_ID:-}" 2>"$TMPDIR/git.err" || true
        fi
        commit=$(git rev-parse -q --verify HEAD 2>/dev/null || true)
        if git -c core.hooksPath=/dev/null push --quiet --no-verify origin "HEAD:refs/heads/$pr_branch" \
               2>"$TMPDIR/git.err"; then
            lifecycle pushed "\"branch\":$(json_str "$pr_branch"),\"commit\":$(json_str "$commit")"
        else
            lifecycle push_failed "\"message\":$(git_words)"
        fi
    fi
fi

# the diff, the run's last line: the runner stores it (untrusted input:
# no external diff drivers, textconv or fsmonitor from the repo's config;
# the a/ b/ prefixes the runner's diff index reads, whatever
# diff.noprefix or diff.mnemonicPrefix say).
# Through a file, not a shell variable: keeps the final newline (git apply
# needs it) and any byte.
git -c core.fsmonitor= add -N . >/dev/null 2>&1 || true
git -c core.fsmonitor= diff --no-ext-diff --no-textconv --no-color \
    --src-prefix=a/ --dst-prefix=b/ "$start" \
    > "$oc/smcp/diff" 2>/dev/null || true
diff_line "$oc/smcp/diff"

exit $status
