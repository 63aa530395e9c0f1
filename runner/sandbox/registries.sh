# Sourced by the sandbox's entry script (entrypoint.sh): every package tool
# of the image pointed at the egress proxy's registry routes (issue 14;
# docs/contracts.md "Package registries"), so `npm install`, `pip
# install`, `go build`, `cargo build`, `mvn`, `gem`/`bundle` and apt
# downloads need no outside DNS and no other host.  A registry the
# deployment did not enable answers 403 "not enabled" (SMCP_REGISTRIES on
# the egress side).  The tools authenticate with the run token, as the
# model clients do: Bearer (npm, cargo) or Basic with the token as the
# password (pip, Go, Maven, gem, apt).
#
# In:  SMCP_EGRESS_URL, SMCP_RUN_TOKEN, HOME (writable; a tmpfs)
# Out: files under $HOME and exported variables (the agent's tools inherit
#      them): ~/.npmrc (npm, yarn 1, pnpm), PIP_INDEX_URL,
#      PIP_TRUSTED_HOST, UV_DEFAULT_INDEX, GOPROXY, GOSUMDB, GOTOOLCHAIN,
#      ~/.cargo/config.toml + CARGO_REGISTRIES_SMCP_TOKEN,
#      ~/.m2/settings.xml, ~/.gemrc + ~/.bundle/config, APT_CONFIG (apt
#      lists and downloads as this user: `apt-get update`,
#      `apt-get download`, `apt-get source`).

# a here-document's text on stdout, by bash itself (no cat: each process
# counts on a follow-up's way to its first model request)
smcp_heredoc() {
    local t
    IFS= read -r -d '' t || true
    printf '%s' "$t"
}

smcp_registries() {
    local e=${SMCP_EGRESS_URL%/} tok=$SMCP_RUN_TOKEN scheme hostport auth
    scheme=${e%%://*}
    hostport=${e#*://}
    hostport=${hostport%%/*}
    # the token as a Basic password (user "x"): JWTs are URL-safe
    auth="$scheme://x:$tok@${e#*://}"
    local r=$e/registry

    # npm (and yarn 1, pnpm): the registry, its token (sent as Bearer),
    # nothing that POSTs (audit, fund) or phones home (update notifier)
    umask 077
    mkdir -p "$HOME/.cargo" "$HOME/.m2" "$HOME/.bundle" \
        "$HOME/.cache/smcp-apt/lists/partial" \
        "$HOME/.cache/smcp-apt/archives/partial"
    smcp_heredoc > "$HOME/.npmrc" <<EOF
registry=$r/npm/
//$hostport/registry/npm/:_authToken=$tok
audit=false
fund=false
update-notifier=false
EOF

    # pip and uv: the simple index (its file links point at the files
    # route); plain http to the egress is trusted
    export PIP_INDEX_URL="$auth/registry/pypi/simple/"
    export PIP_TRUSTED_HOST=${hostport%%:*}
    export PIP_DISABLE_PIP_VERSION_CHECK=1
    export UV_DEFAULT_INDEX=$PIP_INDEX_URL UV_INSECURE_HOST=$PIP_TRUSTED_HOST

    # Go: the module proxy; checksums through the proxy's sumdb
    # passthrough, or the sumdb route
    export GOPROXY="$auth/registry/go" GOSUMDB="sum.golang.org $auth/registry/gosum"
    export GOTOOLCHAIN=local GOFLAGS=-modcacherw

    # cargo: crates.io replaced by the sparse index route (its config.json
    # is rewritten to the download route and asks for the token)
    smcp_heredoc > "$HOME/.cargo/config.toml" <<EOF
[source.crates-io]
replace-with = "smcp"

[source.smcp]
registry = "sparse+$r/crates/index/"

[registries.smcp]
index = "sparse+$r/crates/index/"

[registry]
global-credential-providers = ["cargo:token"]

[net]
git-fetch-with-cli = true
EOF
    export CARGO_REGISTRIES_SMCP_TOKEN="Bearer $tok"

    # Maven: every repository mirrored by the route
    smcp_heredoc > "$HOME/.m2/settings.xml" <<EOF
<settings>
  <mirrors>
    <mirror><id>smcp</id><mirrorOf>*</mirrorOf><url>$r/maven</url></mirror>
  </mirrors>
  <servers>
    <server><id>smcp</id><username>x</username><password>$tok</password></server>
  </servers>
</settings>
EOF

    # RubyGems and bundler
    printf -- '---\n:sources:\n- %s/registry/rubygems/\n' "$auth" > "$HOME/.gemrc"
    printf -- '---\nBUNDLE_MIRROR__ALL: "%s/registry/rubygems/"\n' "$auth" \
        > "$HOME/.bundle/config"

    # apt, as this user (no root here): lists and archives under $HOME
    local apt=$HOME/.cache/smcp-apt codename=bookworm k v
    if [ -r /etc/os-release ]; then
        while IFS='=' read -r k v; do
            [ "$k" = VERSION_CODENAME ] || continue
            v=${v#[\"\']}; v=${v%[\"\']}
            codename=${v:-bookworm}
        done < /etc/os-release
    fi
    smcp_heredoc > "$apt/sources.list" <<EOF
deb $r/debian/debian $codename main
deb $r/debian/debian $codename-updates main
deb $r/debian/debian-security $codename-security main
EOF
    printf 'machine %s/registry/debian/\nlogin x\npassword %s\n' "$hostport" "$tok" \
        > "$apt/auth.conf"
    smcp_heredoc > "$apt/apt.conf" <<EOF
Dir::State::Lists "$apt/lists";
Dir::Cache::Archives "$apt/archives";
Dir::Etc::SourceList "$apt/sources.list";
Dir::Etc::SourceParts "/nonexistent";
Dir::Etc::netrc "$apt/auth.conf";
Debug::NoLocking "true";
APT::Sandbox::User "";
EOF
    export APT_CONFIG=$apt/apt.conf
    umask 022
}

smcp_registries
