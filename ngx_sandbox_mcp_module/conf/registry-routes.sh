# Package registries through the egress (issue 14), sourced by
# egress-routes.sh: read-only routes under /registry/, answered from one
# proxy_cache shared by all runs.  docs/contracts.md "Package registries"
# is the contract; this is how it is built.
#
#   SMCP_REGISTRIES   comma list of npm, pypi, go, crates, maven, rubygems,
#                     debian (default: none; unknown names are an error)
#
#   route                    upstream env (default)               cached long
#   /registry/npm/           NPM_REGISTRY_URL (https://registry.npmjs.org)
#                                                                 .../-/*.tgz
#   /registry/pypi/simple/   PYPI_INDEX_URL (https://pypi.org/simple)     -
#   /registry/pypi/files/    PYPI_FILES_URL (https://files.pythonhosted.org)
#                                                                 everything
#   /registry/go/            GOPROXY_URL (https://proxy.golang.org)
#                                                    @v/*.info, *.mod, *.zip
#   /registry/gosum/         GOSUMDB_URL (https://sum.golang.org)
#                                                         lookup/, tile/
#   /registry/crates/index/  CRATES_INDEX_URL (https://index.crates.io)   -
#   /registry/crates/dl/     CRATES_DL_URL (https://static.crates.io/crates)
#                                                                 everything
#   /registry/maven/         MAVEN_URL (https://repo.maven.apache.org/maven2)
#                                               *.jar, *.pom, ... (not metadata)
#   /registry/rubygems/      RUBYGEMS_URL (https://rubygems.org)
#                                                  gems/*.gem, quick/...
#   /registry/debian/        DEBIAN_MIRROR_URL (https://deb.debian.org)
#                                                  .../pool/... packages
#
# A private upstream's credential: the env named like the URL's with _AUTH
# for _URL (NPM_REGISTRY_AUTH, PYPI_INDEX_AUTH, GOPROXY_AUTH, ...), or
# with _AUTH_FILE (a file holding it): the whole Authorization header
# value ("Bearer ..." or "Basic ..."), read by the nginx master like a
# model key; the sandbox never sees it.
#
#   SMCP_REGISTRY_CACHE_DIR    the cache (/var/cache/smcp-registry)
#   SMCP_REGISTRY_CACHE_SIZE   its cap (10g); least recently used goes first
#   SMCP_REGISTRY_INDEX_VALID  how long metadata is served from it (5m)
#   SMCP_REGISTRY_FILES_VALID  how long package files are (30d; they never
#                              change under one name)
#   SMCP_REGISTRY_RATE         registry requests per run (200r/s; an install
#                              asks for hundreds of files at once), in place
#                              of SMCP_EGRESS_RATE; SMCP_REGISTRY_BURST (1000)
#
# Only GET and HEAD (sandbox_mcp_egress_methods: anything else is a JSON
# 405 after the token check, audited); the run token is required as on
# every route.  Paths are checked as sent (sandbox_mcp_egress_strict_path:
# no ";", no escaped ".", "/" or "\", no empty, "." or ".." segment: a
# JSON 400), so no upstream server reads one as leaving the route's
# prefix ("..;" is ".." to Tomcat and Jetty, which Artifactory and Nexus
# run on).  The upstream gets an allow-list of headers, the same for
# every run (Host, Accept as the cache key has it, a fixed User-Agent,
# the route's credential), never the sandbox's own.  Metadata naming the upstream's own URL (npm packuments'
# tarballs, PyPI simple pages' file links, crates' config.json) is
# rewritten to the egress URL the sandbox used (sub_filter, streaming; the
# upstream is asked for no compression so the body can be rewritten; the
# Content-Length of a rewritten body is dropped).  The cache keeps the
# upstream's bytes; the rewriting happens on the way out of it.

registry_names="npm pypi go crates maven rubygems debian"

# registries: the names in SMCP_REGISTRIES, checked (at source time, in
# this shell: a die here ends the script)
registries=()
list=${SMCP_REGISTRIES:-}
for n in ${list//,/ }; do
    [[ " $registry_names " == *" $n "* ]] \
        || die "SMCP_REGISTRIES: unknown registry '$n' (known: ${registry_names// /, })"
    registries+=("$n")
done
unset n list

registry_rate=${SMCP_REGISTRY_RATE:-200r/s}
registry_burst=${SMCP_REGISTRY_BURST:-1000}
[[ $registry_rate =~ ^[1-9][0-9]*r/[sm]$ ]] \
    || die "SMCP_REGISTRY_RATE=$registry_rate: want N r/s or N r/m (200r/s)"
[[ $registry_burst =~ ^[0-9]+$ ]] || die "SMCP_REGISTRY_BURST=$registry_burst: want a number"

registry_http() {
    local dir=${SMCP_REGISTRY_CACHE_DIR:-/var/cache/smcp-registry}
    local size=${SMCP_REGISTRY_CACHE_SIZE:-10g}
    local files=${SMCP_REGISTRY_FILES_VALID:-30d}
    [ ${#registries[@]} -gt 0 ] || return 0
    [[ $dir =~ ^/[A-Za-z0-9._/-]+$ ]] \
        || die "SMCP_REGISTRY_CACHE_DIR=$dir: want an absolute path"
    [[ $size =~ ^[1-9][0-9]*[kmgKMG]?$ ]] \
        || die "SMCP_REGISTRY_CACHE_SIZE=$size: want a size (10g)"
    cat <<CONF

# registry requests per run (an install fetches many files at once)
limit_req_zone \$sandbox_mcp_token_run zone=smcp_egress_registry:10m rate=$registry_rate;

# package registries: one cache for all runs, capped
proxy_cache_path $dir levels=1:2 keys_zone=smcp_registry:16m
                 max_size=$size inactive=$files use_temp_path=off;

# npm and PyPI answer differently by Accept: the upstream gets one of
# these fixed values (none: its default), and the cache key its kind
map \$http_accept \$smcp_registry_accept_kind {
    "~vnd\\.npm\\.install-v1"          npm-abbreviated;
    "~vnd\\.pypi\\.simple\\.v1\\+json" pypi-json;
    default                           "";
}
map \$smcp_registry_accept_kind \$smcp_registry_accept {
    npm-abbreviated
        "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*";
    pypi-json
        "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01";
    default "";
}
CONF
}

# registry_pass PREFIX: the request to $origin, PREFIX replaced by $path
# (not inherited by nested locations: each repeats it)
registry_pass() {
    cat <<CONF
    set \$smcp_upstream "$origin";
    rewrite "^$1(/.*)\$" "$path\$1" break;
    proxy_pass \$smcp_upstream;
CONF
}

# registry_route ROUTE PREFIX URL_ENV DEFAULT FILES [REWRITE...]
#   FILES: a regex (under PREFIX) of the immutable package files, cached
#   for SMCP_REGISTRY_FILES_VALID ("" none, ".*" all); the rest for
#   SMCP_REGISTRY_INDEX_VALID.  REWRITE: "FROM=TO" pairs, FROM an upstream
#   URL prefix in metadata, TO the egress path that serves it (a TO not
#   starting with / is put in literally).
registry_route() {
    local route=$1 prefix=$2 env=$3 def=$4 files=$5 r from to f
    local valid=${SMCP_REGISTRY_INDEX_VALID:-5m}
    local long=${SMCP_REGISTRY_FILES_VALID:-30d}
    local auth_env=${3%_URL}_AUTH auth="" subs=""
    shift 5
    split_url "$env" "${!env:-$def}"
    [[ $valid =~ ^[1-9][0-9]*[smhd]?$ ]] \
        || die "SMCP_REGISTRY_INDEX_VALID=$valid: want a time (5m)"
    [[ $long =~ ^[1-9][0-9]*[smhd]?$ ]] \
        || die "SMCP_REGISTRY_FILES_VALID=$long: want a time (30d)"
    [ "$files" = '.*' ] && valid=$long files=""

    f="${auth_env}_FILE"
    if [ -n "${!auth_env:-}" ]; then
        auth="env:$auth_env"
    elif [ -n "${!f:-}" ]; then
        [[ ${!f} =~ ^/[A-Za-z0-9._/-]+$ ]] || die "$f=${!f}: want an absolute path"
        auth="file:${!f}"
    fi
    [ -n "$auth" ] && auth="
    sandbox_mcp_egress_credential $auth;
    proxy_set_header Authorization \$sandbox_mcp_credential;"

    for r in "$@"; do
        from=${r%%=*} to=${r#*=}
        [[ $to == /* ]] && to="\$scheme://\$http_host$to"
        subs="$subs
    sub_filter '$from' '$to';"
    done
    [ -n "$subs" ] && subs="$subs
    sub_filter_once off;
    sub_filter_types application/json application/vnd.npm.install-v1+json
                     application/vnd.pypi.simple.v1+json
                     application/vnd.pypi.simple.v1+html;"

    cat <<CONF

# $prefix/: GET and HEAD of $origin$path/, cached
location $prefix/ {
    sandbox_mcp_egress $route;
    sandbox_mcp_egress_methods GET HEAD;
    sandbox_mcp_egress_strict_path on;
    limit_req zone=smcp_egress_registry burst=$registry_burst nodelay;
    # the upstream gets these headers and no other of the sandbox's (no
    # X-Forwarded-*, no override of its base URL, no Accept of its own):
    # nothing the answer, which every run shares, could vary on beyond the
    # cache key below
    proxy_pass_request_headers off;
    proxy_pass_request_body off;$auth
    proxy_set_header Connection "";
    proxy_set_header Content-Length "";
    proxy_set_header Transfer-Encoding "";
    proxy_set_header Accept \$smcp_registry_accept;
    proxy_set_header User-Agent "sandbox-mcp-egress";
    proxy_buffering on;
    proxy_cache smcp_registry;
    proxy_cache_key "\$smcp_upstream\$uri\$is_args\$args|\$smcp_registry_accept_kind";
    proxy_cache_valid 200 $valid;
    proxy_cache_valid 404 1m;
    proxy_cache_lock on;
    proxy_cache_revalidate on;
    proxy_cache_use_stale error timeout updating http_500 http_502 http_503 http_504;
    proxy_ignore_headers Cache-Control Expires Set-Cookie Vary X-Accel-Expires
                         X-Accel-Redirect X-Accel-Limit-Rate X-Accel-Buffering
                         X-Accel-Charset;
    proxy_hide_header Set-Cookie;$subs
$(registry_pass "$prefix")
CONF
    [ -n "$files" ] && cat <<CONF

    # package files never change under one name
    location ~ "^$prefix/$files\$" {
        proxy_cache_valid 200 $long;
        proxy_cache_valid 404 1m;
    $(registry_pass "$prefix" | sed '2,$s/^/    /')
    }
CONF
    echo "}"
}

# the upstream URL of ENV (or DEFAULT) as it appears in metadata
registry_url() { local u=${!1:-$2}; printf '%s' "${u%/}"; }

registry_routes() {
    local n
    for n in "${registries[@]}"; do
        case $n in
        npm)
            registry_route registry-npm /registry/npm NPM_REGISTRY_URL \
                https://registry.npmjs.org '.+/-/[^/]+\.tgz' \
                "$(registry_url NPM_REGISTRY_URL https://registry.npmjs.org)/=/registry/npm/" ;;
        pypi)
            registry_route registry-pypi-simple /registry/pypi/simple PYPI_INDEX_URL \
                https://pypi.org/simple '' \
                "$(registry_url PYPI_FILES_URL https://files.pythonhosted.org)/=/registry/pypi/files/"
            registry_route registry-pypi-files /registry/pypi/files PYPI_FILES_URL \
                https://files.pythonhosted.org '.*' ;;
        go)
            registry_route registry-go /registry/go GOPROXY_URL \
                https://proxy.golang.org '.+/@v/[^/]+\.(info|mod|zip)'
            registry_route registry-gosum /registry/gosum GOSUMDB_URL \
                https://sum.golang.org '(lookup|tile)/.+' ;;
        crates)
            # cargo sends its registry token only to a registry that says
            # auth-required: the sandbox's token is its way in
            registry_route registry-crates-index /registry/crates/index CRATES_INDEX_URL \
                https://index.crates.io '' \
                "$(registry_url CRATES_DL_URL https://static.crates.io/crates)=/registry/crates/dl" \
                '"dl":="auth-required":true,"dl":'
            registry_route registry-crates-dl /registry/crates/dl CRATES_DL_URL \
                https://static.crates.io/crates '.*' ;;
        maven)
            registry_route registry-maven /registry/maven MAVEN_URL \
                https://repo.maven.apache.org/maven2 \
                '.+\.(jar|pom|aar|war|module)(\.(asc|md5|sha1|sha256|sha512))?' ;;
        rubygems)
            registry_route registry-rubygems /registry/rubygems RUBYGEMS_URL \
                https://rubygems.org '(gems/[^/]+\.gem|quick/Marshal\.4\.8/[^/]+\.gemspec\.rz)' ;;
        debian)
            registry_route registry-debian /registry/debian DEBIAN_MIRROR_URL \
                https://deb.debian.org '.+/pool/.+\.(deb|udeb|dsc|tar\.[a-z0-9]+|diff\.gz)' ;;
        esac
    done

    cat <<CONF

location /registry/ {
    return 403 '$(json_error permission_error "egress: this package registry is not enabled (SMCP_REGISTRIES: ${SMCP_REGISTRIES:-none})")';
}
CONF
}
