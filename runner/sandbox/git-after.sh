# Sourced by the sandbox's entry script (entrypoint.sh): the git steps that
# run after the agent, once every process of it is killed: the run's tree,
# its diff and, for a pull request, the commit pushed.  docs/architecture.md
# ("The entry script after the agent") says why it is done this way.
#
# Nothing of the agent's git is used: not its configuration (the
# repository's .git/config and what it includes, ~/.gitconfig,
# $XDG_CONFIG_HOME/git/*: hooks, filters, diff drivers, fsmonitor, pushurl,
# insteadOf, proxies, the author), not its attributes, not its index, not
# its refs but HEAD read as data, and none of its objects unchecked.  Every
# git command runs in a git directory this script makes after the agent
# ended ($gsf, mktemp -d: no process of the agent is alive to have touched
# it), with no environment but ours (env -i), its own configuration alone
# (no system or global file), attributes that turn every conversion off
# (info/attributes, which outranks .gitattributes) and no hooks.  An object
# of the agent's repository enters that directory only through `git
# index-pack`, which names each object by the hash of its content: an
# object the agent altered (or one a replace ref, graft or commit-graph
# says is another) is then simply missing, and what reads it
# fails.  The work tree is hashed by us.  The diff is taken between the
# run's start and that tree, reading checked objects only; the commit
# pushed has that tree.
#
# In:  the entry script's start (the commit the run started from, or the
#      empty tree), basic (the git host's Basic credential: the run
#      token), lifecycle, json_str and git_words; the current directory:
#      the run's repository; SMCP_* (the run's)
# Out: git_after_tree, git_after_push, git_after_hand_back, git_after_done,
#      gs_put

gsf=""              # the fresh git directory (its git/, index, files)
gs_wt=""            # the work tree, its physical path
gs_objects=""       # the agent's object directory, read through index-pack
gs_alt=""           # set: a command may read the agent's objects
gs_base=""          # what the diff is against: start, or the empty tree
gs_tree=""          # the work tree's tree
gs_pushed=""        # the commit pushed (or to be)

# git in the fresh directory: nothing of the agent's environment or
# configuration; with gs_alt set, the agent's objects readable too
sg() {
    env -i PATH="$PATH" HOME="$gsf/home" LC_ALL=C \
        GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_ATTR_NOSYSTEM=1 \
        GIT_DIR="$gsf/git" GIT_WORK_TREE="$gs_wt" GIT_INDEX_FILE="$gsf/index" \
        GIT_NO_REPLACE_OBJECTS=1 GIT_TERMINAL_PROMPT=0 \
        GIT_AUTHOR_NAME="${SMCP_GIT_AUTHOR_NAME:-OpenCode sandbox}" \
        GIT_AUTHOR_EMAIL="${SMCP_GIT_AUTHOR_EMAIL:-sandbox@localhost}" \
        GIT_COMMITTER_NAME="${SMCP_GIT_AUTHOR_NAME:-OpenCode sandbox}" \
        GIT_COMMITTER_EMAIL="${SMCP_GIT_AUTHOR_EMAIL:-sandbox@localhost}" \
        ${gs_alt:+"GIT_ALTERNATE_OBJECT_DIRECTORIES=$gs_objects"} \
        git -C "$gs_wt" "$@"
}

# the objects named on stdin (one id a line), from the agent's repository
# into the fresh one through index-pack: stored under the hash of what
# they hold
gs_copy_in() {
    gs_alt=1 sg pack-objects -q --stdout | sg index-pack --stdin >/dev/null
}

# the fresh git directory: made now, configured for this alone
gs_init() {
    local c
    gsf=$(mktemp -d "$TMPDIR/smcp-git.XXXXXX") || return 1
    gs_wt=$(pwd -P) || return 1
    gs_objects=$gs_wt/.git/objects
    mkdir "$gsf/home" && sg init -q --template= || return 1
    for c in core.hooksPath=/dev/null core.fsmonitor=false \
             core.untrackedCache=false core.attributesFile=/dev/null \
             core.excludesFile=/dev/null core.commitGraph=false \
             core.multiPackIndex=false core.autocrlf=false \
             core.splitIndex=false core.sparseCheckout=false \
             pack.useBitmaps=false gc.auto=0 maintenance.auto=false \
             submodule.recurse=false push.recurseSubmodules=no \
             protocol.allow=never protocol.http.allow=always \
             protocol.https.allow=always; do
        sg config "${c%%=*}" "${c#*=}" || return 1
    done
    # the git host through the egress proxy, with the run token (as the
    # global configuration the agent had said before it could change it)
    sg config "url.$SMCP_EGRESS_URL/github/.insteadOf" \
              "https://$SMCP_GIT_HOST/" || return 1
    sg config "http.$SMCP_EGRESS_URL/.extraHeader" \
              "Authorization: Basic $basic" || return 1
    mkdir "$gsf/git/info" || return 1
    printf '* -text !eol !crlf !filter !diff !merge -ident !working-tree-encoding\n' \
        > "$gsf/git/info/attributes"
}

# gs_tree_against BASE OUT: the work tree as a tree, against BASE (start,
# or the empty tree): the index is BASE's, refreshed from the files (what
# BASE tracked, plus what is new and not ignored by the work tree's
# .gitignore files), hashed without writing; then the blobs a diff of BASE
# and the tree reads: BASE's copied in (checked), the work tree's written;
# then that diff into OUT
gs_tree_against() {
    local base=$1 out=$2
    gs_base=$base
    sg read-tree "$base" || return 1
    sg ls-files -z -c -o --exclude-standard | sed -z 's|/$||' \
        | sg update-index -z --add --remove --replace --info-only --stdin \
        || return 1
    gs_tree=$(sg write-tree --missing-ok) || return 1
    sg diff-tree -r --no-renames --diff-filter=MDT "$base" "$gs_tree" \
        | awk '$1 != ":160000" { print $3 }' | gs_copy_in || return 1
    sg diff-tree -r -z --no-renames --name-only --diff-filter=AMT "$base" \
        "$gs_tree" > "$gsf/changed" || return 1
    sg update-index -z --force-remove --stdin < "$gsf/changed" \
        && sg update-index -z --add --stdin < "$gsf/changed" || return 1
    [ "$(sg write-tree --missing-ok)" = "$gs_tree" ] || return 1
    sg diff --no-ext-diff --no-textconv --no-color \
        --src-prefix=a/ --dst-prefix=b/ "$base" "$gs_tree" > "$out"
}

# git_after_tree: the fresh directory, the run's tree and its diff against
# the run's start in $gsf/diff.  A start that cannot be read
# back from the agent's repository as it was (missing, altered) leaves
# nothing to diff against: the diff is then the whole tree's, against the
# empty tree, and no commit is made (git_after_push says so).  1: no diff
git_after_tree() {
    local empty
    gs_init || return 1
    empty=$(sg hash-object -t tree -w /dev/null) || return 1
    if [ "$start" != "$empty" ]; then
        # the start's commit and trees (no blobs: those the diff reads
        # come later); the walk ends there
        printf '%s\n' "$start" > "$gsf/git/shallow"
        gs_alt=1 sg rev-list --objects --no-object-names --no-walk \
            --filter=blob:none "$start" 2>/dev/null | gs_copy_in 2>/dev/null
        if gs_tree_against "$start" "$gsf/diff" 2>/dev/null; then
            return 0
        fi
    fi
    gs_tree_against "$empty" "$gsf/diff"
}

# the agent's HEAD commit, read as data (no git runs in its repository):
# empty when HEAD is unborn, neither a commit id nor a branch of refs/heads,
# or not plainly stored
gs_agent_head() {
    local d=$gs_wt/.git v=""
    if [ -f "$d/HEAD" ]; then
        v=$(head -c 512 "$d/HEAD")
    fi
    if [[ $v =~ ^ref:\ (refs/heads/[A-Za-z0-9._/-]{1,200})$ ]] \
       && [[ ${BASH_REMATCH[1]} != *..* ]]; then
        v=${BASH_REMATCH[1]}
        if [ -f "$d/$v" ]; then
            v=$(head -c 512 "$d/$v")
        elif [ -f "$d/packed-refs" ]; then
            v=$(awk -v r="$v" '$2 == r { print $1; exit }' "$d/packed-refs")
        else
            v=""
        fi
    fi
    if [[ $v =~ ^[0-9a-f]{40}$ ]]; then
        printf '%s' "$v"
    fi
}

# the tree id of a commit of the fresh directory
gs_tree_of() { sg cat-file commit "$1" | sed -n '1s/^tree //p'; }

# git_after_push BRANCH SUBJECT BODY ERR_FILE: the commit of the run's tree
# pushed to BRANCH of SMCP_REPOSITORY.  Its parent is the agent's HEAD when
# that descends from the start (the agent's own commits go with it; when
# HEAD's tree is the run's tree, HEAD itself is pushed), else the start.
# Prints the lifecycle line (pushed, push_failed, pr_skipped).
git_after_push() {
    local branch=$1 subject=$2 body=$3 err=$4 head parent=""
    if [ "$gs_base" != "$start" ]; then
        lifecycle push_failed "\"message\":$(json_str "the run's start ($start) cannot be read back from the repository (missing or altered): nothing pushed")"
        return 0
    fi
    if [ "$(sg cat-file -t "$start")" = commit ]; then
        parent=$start
        if [ "$(gs_tree_of "$start")" = "$gs_tree" ]; then
            lifecycle pr_skipped '"reason":"no changes"'
            return 0
        fi
    elif [ "$start" = "$gs_tree" ]; then
        lifecycle pr_skipped '"reason":"no changes"'
        return 0
    fi
    head=$(gs_agent_head)
    if [ -n "$head" ] && [ "$head" != "$start" ]; then
        # the agent's commits since the start, checked as they come in
        gs_alt=1 sg rev-list "$head" ${parent:+"^$parent"} 2>/dev/null \
            | gs_copy_in 2>/dev/null
        if [ -n "$parent" ]; then
            sg merge-base --is-ancestor "$start" "$head" 2>/dev/null \
                && parent=$head
        elif sg rev-list "$head" >/dev/null 2>&1; then
            parent=$head
        fi
    fi
    if [ -n "$head" ] && [ "$parent" = "$head" ] \
       && [ "$(gs_tree_of "$head")" = "$gs_tree" ]; then
        gs_pushed=$head
    else
        gs_pushed=$(sg commit-tree "$gs_tree" ${parent:+-p "$parent"} \
                        -m "$subject" -m "$body" 2>"$err") || {
            gs_pushed=""
            lifecycle push_failed "\"message\":$(git_words "$err")"
            return 0
        }
    fi
    # the push reads what the remote lacks from the agent's objects too:
    # an object altered there reaches the remote under another name, so
    # the remote refuses the push (the commit is missing an object); it
    # never stores the commit with other content
    rm -f "$gsf/git/shallow"
    if gs_alt=1 sg push --quiet --no-verify "$SMCP_REPOSITORY" \
           "$gs_pushed:refs/heads/$branch" 2>"$err"; then
        lifecycle pushed "\"branch\":$(json_str "$branch"),\"commit\":$(json_str "$gs_pushed")"
    else
        lifecycle push_failed "\"message\":$(git_words "$err")"
    fi
}

# gs_put SRC DEST: DEST replaced by a copy of SRC (mode 0644): a new file
# made beside it, renamed over it (no path the agent left is opened for
# writing)
gs_put() {
    local tmp
    tmp=$(mktemp "$(dirname "$2")/.smcp.XXXXXX") || return 1
    if cat "$1" > "$tmp" && chmod 0644 "$tmp" && mv -fT "$tmp" "$2"; then
        return 0
    fi
    rm -f "$tmp"
    return 1
}

# git_after_hand_back BRANCH: the agent's repository left on the commit
# made, as `git checkout -B BRANCH` would leave it (a later run of the
# session starts there): its new objects as a pack, the branch, HEAD, the
# index; files written, no git run in it
git_after_hand_back() {
    local d=$gs_wt/.git branch=$1 h
    [ -n "$gs_pushed" ] && [ -d "$d/objects" ] && [ ! -L "$d" ] || return 0
    h=$(find "$gsf/git/objects" -path '*/[0-9a-f][0-9a-f]/*' -type f \
            | sed 's|.*/\([0-9a-f][0-9a-f]\)/\([0-9a-f]*\)$|\1\2|' \
            | sg pack-objects -q "$gsf/out") || return 0
    mkdir -p "$d/objects/pack" "$(dirname "$d/refs/heads/$branch")" \
        2>/dev/null || return 0
    gs_put "$gsf/out-$h.pack" "$d/objects/pack/pack-$h.pack" \
        && gs_put "$gsf/out-$h.idx" "$d/objects/pack/pack-$h.idx" \
        && printf '%s\n' "$gs_pushed" > "$gsf/ref" \
        && gs_put "$gsf/ref" "$d/refs/heads/$branch" \
        && printf 'ref: refs/heads/%s\n' "$branch" > "$gsf/head" \
        && gs_put "$gsf/head" "$d/HEAD" \
        && gs_put "$gsf/index" "$d/index" || true
}

# the fresh directory removed
git_after_done() {
    [ -z "$gsf" ] || rm -rf "$gsf"
}
