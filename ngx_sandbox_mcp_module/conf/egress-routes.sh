#!/usr/bin/env bash
# Prints the egress routes (nginx location blocks, to go inside the egress
# server{}) for every provider whose credential is in the environment;
# `egress-routes.sh --http` prints what they need at the http{} level.
# `make up`, docker-compose and the tests render the egress server with it,
# so the routes that are tested are the routes that ship.
#
#   http {
#       include egress-http.conf;        # egress-routes.sh --http
#       server {
#           listen ...;
#           include egress-routes.conf;  # egress-routes.sh
#       }
#   }
#
# A route is: a path prefix the sandbox talks to, the upstream base URL,
# how the real credential is sent, and the endpoints the agent may call:
# exactly the inference endpoints OpenCode 1.18.33 calls for that provider
# (seen in full runs, t/providers.t and t/opencode_sandbox.t), nothing
# else (no files, batches, fine-tunes, vector stores, model lists, token
# counts, other API flavours: those get a JSON 403).  Adding a provider is
# configuration: copy a block.  Credentials are read by the nginx master
# from the environment (env:NAME) at start and reload; the sandbox never
# sees them.
#
#   route        credential env         base URL env (default)
#                allowed (POST), what OpenCode uses it for
#   /anthropic/  ANTHROPIC_API_KEY      ANTHROPIC_BASE_URL (https://api.anthropic.com)
#                /v1/messages (streamed)
#   /openai/     OPENAI_API_KEY         OPENAI_BASE_URL (https://api.openai.com)
#                /v1/responses (the Responses API, streamed)
#   /azure/      AZURE_OPENAI_API_KEY   AZURE_OPENAI_BASE_URL (https://RESOURCE.openai.azure.com)
#                /openai/v1/responses (Azure's v1 API, the deployment as
#                the model, no api-version; header api-key)
#   /google/     GOOGLE_API_KEY         GOOGLE_BASE_URL (https://generativelanguage.googleapis.com)
#                /v1beta/models/MODEL:streamGenerateContent (?alt=sse)
#   /cloudflare/ CF_AIG_TOKEN           CF_AIG_BASE_URL (https://gateway.ai.cloudflare.com/v1/ACCOUNT_ID/GATEWAY_ID)
#                the vendors' endpoints under the gateway, as Cloudflare's
#                guide for OpenCode points OpenCode's providers at them:
#                anthropic/v1/messages, openai/responses,
#                google-ai-studio/v1beta/models/MODEL:streamGenerateContent;
#                the gateway token goes in cf-aig-authorization (an
#                authenticated gateway paying with unified billing or
#                keys stored in the gateway; no vendor key is sent)
#   /compat/     COMPAT_API_KEY         COMPAT_BASE_URL (any OpenAI-compatible server)
#                /v1/chat/completions (streamed)
#   /github/     GITHUB_TOKEN           GITHUB_URL (https://github.com)
#                git smart HTTP of the run's repository; pushes: see below
#   /github-api/ GITHUB_TOKEN           GITHUB_API_URL (https://api.github.com; GitHub
#                                       Enterprise: https://HOST/api/v3)
#                GET the run's repository, GET/POST its pulls
#
# The credentials and base URLs above, and the settings of the routes
# (SMCP_CA_BUNDLE, SMCP_RESOLVER, SMCP_RESOLVER_VALID, SMCP_RESOLVER_IPV6,
# SMCP_RESOLV_CONF, SMCP_EGRESS_RATE, SMCP_EGRESS_BURST, SMCP_EGRESS_CONN,
# SMCP_EGRESS_HEADER_TIMEOUT, SMCP_<ROUTE>_SERVER_TOOLS, the registries'),
# with their defaults: docs/configuration.md, "The egress routes".
#
# Upstream names are resolved while nginx runs, not when it starts: a name
# that does not resolve (yet) is a JSON 502 on its route until it does, and
# a provider that moves is followed within the answer's TTL.  proxy_pass
# takes the upstream from a variable for that; TLS still sends the name as
# SNI and verifies the certificate against it (nginx takes both from the
# proxy_pass URL).  Requests are limited per run (limit_req on the run
# token), per sandbox at once (limit_conn), and idle connections closed.
#
# Every model request's body is read before it goes upstream
# (sandbox_mcp_egress_model): one that asks the provider for a server-side
# tool (Anthropic's web_search, web_fetch, code_execution, mcp_servers,
# container, image and document sources by URL; OpenAI's web_search,
# file_search, code_interpreter, mcp, image_generation,
# computer_use_preview, stored prompts, images and files by URL; Chat
# Completions' web_search_options; Gemini's google_search, url_context,
# code_execution, files by URI) is a JSON 403 naming the tool and its
# setting, unless the route allows it (SMCP_<ROUTE>_SERVER_TOOLS: a comma
# list of the settings the 403 names, or all).  The agent's own function
# tools always pass.
#
# Every model answer is metered (the egress meter): its usage, as the
# provider counts it, priced by SMCP_EGRESS_PRICES ("MODEL=INPUT/OUTPUT
# [/CACHE_READ[/CACHE_WRITE]] ...", US dollars per million tokens; MODEL
# exact, a prefix ending in "*", or "*"), each a sandbox_mcp_egress_price
# line: a run's maxCostUsd is held against that.  The routes ask the
# upstream for no compression, so that the answers can be read.
#
# The egress proxy runs as its own nginx instance (`make up`,
# docker-compose): a sandbox that opens thousands of idle connections
# exhausts at most the egress workers, never the MCP endpoint's.
#
#   egress-routes.sh --routes   the route names it renders (those the egress
#                       announces: sandbox_mcp_egress_announce), one line
#   egress-routes.sh --check    every setting above checked, and a model
#                       provider required: make up stops here without one
#   egress-routes.sh --notify   the /mcp location's sandbox_mcp_notify_allow
#                       line for SMCP_NOTIFY_ALLOW (nothing without it)
set -euo pipefail

die() { echo "egress-routes.sh: $*" >&2; exit 1; }

# SMCP_NOTIFY_ALLOW: URL prefixes, nothing nginx's parser could misread
# (the module checks each further)
notify_check() {
    local p re='^https?://[][A-Za-z0-9.:-]+/[A-Za-z0-9._~%/?=&+,@:-]*$'
    for p in $SMCP_NOTIFY_ALLOW; do
        [[ $p =~ $re ]] \
            || die "SMCP_NOTIFY_ALLOW: not a URL prefix (scheme://host[:port]/path): $p"
    done
}

if [ "${1:-}" = --notify ]; then
    if [ -n "${SMCP_NOTIFY_ALLOW:-}" ]; then
        notify_check
        echo "sandbox_mcp_notify_allow $SMCP_NOTIFY_ALLOW;"
    fi
    exit 0
fi

# --routes, --check: the routes rendered (every setting checked on the way)
case "${1:-}" in
    --routes|--check)
        self=${BASH_SOURCE[0]}
        bash "$self" --http >/dev/null || exit 1
        conf=$(bash "$self") || exit 1
        if [ "$1" = --routes ]; then
            sed -n -e 's/^ *sandbox_mcp_egress \([A-Za-z0-9._-]*\);$/\1/p' \
                -e 's/^ *sandbox_mcp_egress_inbox;$/inbox/p' <<< "$conf" \
                | awk '!seen[$0]++' | paste -sd' '
            exit 0
        fi
        [[ $conf == *"sandbox_mcp_egress_model on;"* ]] \
            || die "no model provider: set ANTHROPIC_API_KEY (or OPENAI_API_KEY; AZURE_OPENAI_API_KEY with AZURE_OPENAI_BASE_URL; GOOGLE_API_KEY; CF_AIG_TOKEN with CF_AIG_BASE_URL; COMPAT_API_KEY with COMPAT_BASE_URL): without one the egress proxy reaches no model, and every run would fail"
        exit 0
        ;;
esac

# the package registries' routes (issue 14)
. "$(dirname "${BASH_SOURCE[0]}")/registry-routes.sh"

ca=${SMCP_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
rate=${SMCP_EGRESS_RATE:-10r/s}
burst=${SMCP_EGRESS_BURST:-40}
conn=${SMCP_EGRESS_CONN:-32}
header_timeout=${SMCP_EGRESS_HEADER_TIMEOUT:-10s}

[[ $rate =~ ^[1-9][0-9]*r/[sm]$ ]] || die "SMCP_EGRESS_RATE=$rate: want N r/s or N r/m (10r/s)"
[[ $burst =~ ^[0-9]+$ ]] || die "SMCP_EGRESS_BURST=$burst: want a number"
[[ $conn =~ ^[1-9][0-9]*$ ]] || die "SMCP_EGRESS_CONN=$conn: want a number"
[[ $header_timeout =~ ^[1-9][0-9]*(ms|s|m)?$ ]] \
    || die "SMCP_EGRESS_HEADER_TIMEOUT=$header_timeout: want a time (10s)"

# the resolver directive's addresses: IPv6 ones in brackets; link-local
# ones (with a zone) are not for nginx
resolvers() {
    local a out=""
    if [ -n "${SMCP_RESOLVER:-}" ]; then
        out=$SMCP_RESOLVER
    else
        while read -r key a _; do
            [ "$key" = nameserver ] || continue
            case $a in
                *%*) continue ;;
                *:*) a="[$a]" ;;
            esac
            out="$out $a"
        done < "${SMCP_RESOLV_CONF:-/etc/resolv.conf}"
    fi
    out=${out# }
    [ -n "$out" ] || die "no DNS server: set SMCP_RESOLVER (no nameserver in ${SMCP_RESOLV_CONF:-/etc/resolv.conf})"
    [[ $out =~ ^[][0-9A-Za-z.:\ -]+$ ]] || die "SMCP_RESOLVER=$out: want addresses"
    printf '%s' "$out"
}

resolver="$(resolvers)"
[ -n "${SMCP_RESOLVER_VALID:-}" ] && {
    [[ $SMCP_RESOLVER_VALID =~ ^[0-9]+[smh]?$ ]] || die "SMCP_RESOLVER_VALID=$SMCP_RESOLVER_VALID: want a time (30s)"
    resolver="$resolver valid=$SMCP_RESOLVER_VALID"
}
[ "${SMCP_RESOLVER_IPV6:-off}" = on ] || resolver="$resolver ipv6=off"

if [ "${1:-}" = --http ]; then
    cat <<CONF
# generated by ngx_sandbox_mcp_module/conf/egress-routes.sh --http

# this instance is the egress proxy: the names of its routes go to Redis,
# where opencode_run_task finds whether a run's model and repository can
# be reached (and refuses at once, naming the setting, when not)
sandbox_mcp_egress_announce on;

# requests per run: \$sandbox_mcp_token_run is the run of a valid egress
# token (checked without Redis); requests without one are not counted here
# (they are refused with 401 in the access phase)
limit_req_zone \$sandbox_mcp_token_run zone=smcp_egress_run:10m rate=$rate;

# requests at once per sandbox: its run (a valid token's), else its
# address; never the address alone (behind runner/egress-relay every
# sandbox has the relay's)
map \$sandbox_mcp_token_run \$smcp_egress_sandbox {
    ""      \$binary_remote_addr;
    default \$sandbox_mcp_token_run;
}
limit_conn_zone \$smcp_egress_sandbox zone=smcp_egress_addr:10m;

map \$limit_conn_status \$smcp_limited {
    REJECTED "egress: too many requests at once from this sandbox";
    default  "egress: too many requests for this run; slow down";
}
CONF
    registry_http
    exit 0
fi

# split_url NAME URL: $origin (scheme://host[:port]) and $path (no trailing
# slash); nothing nginx's configuration parser or rewrite could misread
split_url() {
    local url=${2%/}
    [[ $url =~ ^(https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]+)?)(/[A-Za-z0-9._~%/-]*)?$ ]] \
        || die "$1: not a base URL the egress proxy can use: $2"
    origin=${BASH_REMATCH[1]}
    path=${BASH_REMATCH[4]}
}

# SMCP_EGRESS_PRICES: sandbox_mcp_egress_price lines
prices() {
    local p model rest list re_model='^([A-Za-z0-9._:/@-]+\*?|\*)$'
    local re_usd='^[0-9]+(\.[0-9]{1,6})?(/[0-9]+(\.[0-9]{1,6})?){1,3}$'
    local all=${SMCP_EGRESS_PRICES:-}
    read -ra list <<< "${all//,/ }"
    for p in "${list[@]}"; do
        model=${p%%=*}
        rest=${p#*=}
        [[ $p == *=* && $model =~ $re_model && $rest =~ $re_usd ]] \
            || die "SMCP_EGRESS_PRICES: want MODEL=INPUT/OUTPUT[/CACHE_READ[/CACHE_WRITE]] (US dollars per million tokens, MODEL exact, prefix* or *): $p"
        printf 'sandbox_mcp_egress_price %s %s;\n' "$model" "${rest//\// }"
    done
}

json_error() {
    printf '{"type":"error","error":{"type":"%s","message":"%s"}}' "$1" "$2"
}

price_lines=$(prices) || exit 1

sed "s|@CA_BUNDLE@|$ca|" <<CONF
# generated by ngx_sandbox_mcp_module/conf/egress-routes.sh
default_type application/json;

# stream both ways: SSE from model APIs reaches the agent as it comes
# (each location repeats \`proxy_set_header Connection ""\`: a location that
# sets any proxy_set_header inherits none from here)
proxy_http_version 1.1;
proxy_buffering off;
proxy_request_buffering off;
proxy_read_timeout 1h;
proxy_send_timeout 1h;
proxy_redirect off;
client_max_body_size 64m;

# the egress meter's prices (SMCP_EGRESS_PRICES)
${price_lines:-# none: model answers are counted, not priced}

# TLS upstreams are verified: the real keys go only to the real hosts
proxy_ssl_server_name on;
proxy_ssl_verify on;
proxy_ssl_verify_depth 4;
proxy_ssl_trusted_certificate @CA_BUNDLE@;

# upstream names, resolved at run time (see the header of the script)
resolver $resolver;
resolver_timeout 5s;

# requests per run, requests at once per sandbox (egress-routes.sh --http
# has the zones)
limit_req zone=smcp_egress_run burst=$burst nodelay;
limit_req_status 429;
limit_req_log_level warn;
limit_conn smcp_egress_addr $conn;
limit_conn_status 429;
limit_conn_log_level warn;

# idle and slow connections do not stay: a sandbox cannot hold the
# workers' connections by opening many and sending nothing
client_header_timeout $header_timeout;
client_body_timeout 60s;
send_timeout 60s;
keepalive_timeout 30s;
keepalive_requests 1000;
reset_timedout_connection on;

# the upstream of a route: proxy_pass takes it from here (names are
# resolved per request), and the 502 below names it
set \$smcp_upstream "";

# no location here sets error_page: they all inherit these
error_page 413 = @smcp_too_large;
error_page 429 = @smcp_rate_limited;
error_page 502 504 = @smcp_upstream_down;

location @smcp_upstream_down {
    return 502 '$(json_error api_error 'egress: the upstream $smcp_upstream cannot be reached (connection refused or timed out, or its name does not resolve)')';
}

location @smcp_rate_limited {
    add_header Retry-After 1 always;
    return 429 '$(json_error rate_limit_error '$smcp_limited')';
}

location @smcp_too_large {
    return 413 '$(json_error request_too_large 'egress: request body too large')';
}

location / {
    return 404 '$(json_error not_found_error 'egress: unknown route')';
}

# messages for the running agent (opencode_send_message): its sandbox
# takes them here one by one, its run token checked as on every route
# (route name "inbox", announced)
location = /smcp/inbox {
    sandbox_mcp_egress_inbox;
}
CONF

# upstream NAME CRED_ENV FORMAT HEADER ORIGIN PATH: the end of a location
# under /NAME/: the real credential (from CRED_ENV, as FORMAT) in HEADER,
# the request sent to ORIGIN with /NAME replaced by PATH
upstream() {
    cat <<CONF
    sandbox_mcp_egress_credential env:$2 $3;
    proxy_set_header $4 \$sandbox_mcp_credential;
    proxy_set_header Connection "";
    set \$smcp_upstream "$5";
    rewrite "^/$1(/.*)\$" "$6\$1" break;
    proxy_pass \$smcp_upstream;
}
CONF
}

# server_tools NAME: the provider's server-side tools the route allows,
# from SMCP_<NAME>_SERVER_TOOLS (a comma list of settings: web_search,
# web_fetch, code_execution, mcp_servers, mcp, google_search, url_context,
# ...; "all"; default none)
server_tools() {
    local var="SMCP_${1^^}_SERVER_TOOLS" list
    list=${!var:-off}
    list=${list//,/ }
    [[ $list =~ ^[A-Za-z0-9_\ ]+$ ]] \
        || die "$var=${!var}: want a comma list of tool settings (web_search,web_fetch), all or off"
    printf '%s' "$list"
}

# route NAME CRED_ENV FORMAT HEADER BASE_URL ALLOWED WHAT
#   ALLOWED: a regex of the paths under /NAME the agent may POST to;
#   WHAT: the same in words, for the refusal of everything else
route() {
    local name=$1 env=$2 format=$3 header=$4 url=$5 allowed=$6 what=$7 tools
    split_url "$name" "$url"
    tools=$(server_tools "$name") || exit 1
    cat <<CONF

# $name: POST $what
location /$name/ {
    sandbox_mcp_egress $name;
    sandbox_mcp_egress_deny "egress: $name: only POST $what is allowed";
}

location ~ "^/$name$allowed\$" {
    if (\$request_method != POST) {
        return 405 '$(json_error invalid_request_error "egress: $name: only POST is allowed here")';
    }
    sandbox_mcp_egress $name;
    sandbox_mcp_egress_model on;
    sandbox_mcp_egress_server_tools $tools;
    # the body is read (and metered) in a worker: at most the providers'
    # own limit (Anthropic's 32 MB)
    client_max_body_size 32m;
    proxy_set_header Accept-Encoding "";
$(upstream "$name" "$env" "$format" "$header" "$origin" "$path")
CONF
}

# github_api PATH METHODS WHAT [PUSH]: REST on the run's own repository,
# /repos/OWNER/REPO followed by PATH, for the METHODS (a regex) only (WHAT:
# them in words); PUSH: what the module checks of a request's body
github_api() {
    cat <<CONF
location ~ ^/github-api/repos/(?<smcp_owner>[A-Za-z0-9_.-]+)/(?<smcp_repo>[A-Za-z0-9_.-]+)$1\$ {
    if (\$request_method !~ ^($2)\$) {
        return 405 '$(json_error invalid_request_error "egress: github-api: only $3 allowed here")';
    }
    sandbox_mcp_egress github-api;
    sandbox_mcp_egress_repository \$smcp_owner/\$smcp_repo;${4:+
    sandbox_mcp_egress_push $4;}
$(upstream github-api GITHUB_TOKEN bearer Authorization "$api_origin" "$api_path")
CONF
}

gem='/models/[A-Za-z0-9._-]+:streamGenerateContent'

[ -n "${ANTHROPIC_API_KEY:-}" ] && route anthropic ANTHROPIC_API_KEY raw x-api-key \
    "${ANTHROPIC_BASE_URL:-https://api.anthropic.com}" \
    '/v1/messages' '/v1/messages'
[ -n "${OPENAI_API_KEY:-}" ] && route openai OPENAI_API_KEY bearer Authorization \
    "${OPENAI_BASE_URL:-https://api.openai.com}" \
    '/v1/responses' '/v1/responses'
[ -n "${AZURE_OPENAI_API_KEY:-}" ] && route azure AZURE_OPENAI_API_KEY raw api-key \
    "${AZURE_OPENAI_BASE_URL:?set AZURE_OPENAI_BASE_URL (https://RESOURCE.openai.azure.com)}" \
    '/openai/v1/responses' '/openai/v1/responses'
[ -n "${GOOGLE_API_KEY:-}" ] && route google GOOGLE_API_KEY raw x-goog-api-key \
    "${GOOGLE_BASE_URL:-https://generativelanguage.googleapis.com}" \
    "/v1beta$gem" '/v1beta/models/MODEL:streamGenerateContent'
[ -n "${CF_AIG_TOKEN:-}" ] && route cloudflare CF_AIG_TOKEN bearer cf-aig-authorization \
    "${CF_AIG_BASE_URL:?set CF_AIG_BASE_URL (https://gateway.ai.cloudflare.com/v1/ACCOUNT_ID/GATEWAY_ID)}" \
    "/(anthropic/v1/messages|openai/responses|google-ai-studio/v1beta$gem)" \
    'anthropic/v1/messages, openai/responses and google-ai-studio/v1beta/models/MODEL:streamGenerateContent'
[ -n "${COMPAT_API_KEY:-}" ] && route compat COMPAT_API_KEY bearer Authorization \
    "${COMPAT_BASE_URL:?set COMPAT_BASE_URL (the OpenAI-compatible server)}" \
    '/v1/chat/completions' '/v1/chat/completions'

if [ -n "${GITHUB_TOKEN:-}" ]; then
    split_url github "${GITHUB_URL:-https://github.com}"
    git_origin=$origin git_path=$path
    split_url github-api "${GITHUB_API_URL:-https://api.github.com}"
    api_origin=$origin api_path=$path
    cat <<CONF

# git smart HTTP on the run's own repository: clone and fetch; a push
# (receive-pack) only when the run asked for a pull request, and then only
# of its own branch opencode/<runId>: the module reads the push's command
# list before anything goes upstream (named captures: the rewrite below
# resets \$1..\$9)
location ~ ^/github/(?<smcp_owner>[A-Za-z0-9_.-]+)/(?<smcp_repo>[A-Za-z0-9_.-]+?)(\\.git)?/(info/refs|git-upload-pack|git-receive-pack)\$ {
    sandbox_mcp_egress github;
    sandbox_mcp_egress_repository \$smcp_owner/\$smcp_repo;
    sandbox_mcp_egress_push git;
$(upstream github GITHUB_TOKEN basic Authorization "$git_origin" "$git_path")

location /github/ {
    return 403 '$(json_error permission_error 'egress: only git smart HTTP (info/refs, git-upload-pack, git-receive-pack) is allowed')';
}

# REST on the run's own repository: the repository lookup, and pull
# requests (listing; opening one when the run asked for it, with the run's
# branch as its head)
CONF
    github_api '' 'GET|HEAD' 'GET is'
    echo
    github_api /pulls 'GET|HEAD|POST' 'GET and POST are' pull_request
    cat <<CONF

location /github-api/ {
    return 403 '$(json_error permission_error 'egress: only the repository lookup and its pull requests are allowed')';
}
CONF
fi

registry_routes

# completion notifications (SMCP_NOTIFY_ALLOW: the destinations' URL
# prefixes, space-separated): the runner POSTs each to /notify with a
# token of scope "notify" (a sandbox's is refused) and the destination in
# X-SMCP-Notify-To; the module checks it against the prefixes and sends
# it to the address it checked (ngx_http_sandbox_mcp_notify_egress.c)
if [ -n "${SMCP_NOTIFY_ALLOW:-}" ]; then
    notify_check
    cat <<CONF

location = /notify {
    sandbox_mcp_egress_notify on;
    sandbox_mcp_notify_allow $SMCP_NOTIFY_ALLOW;
    client_max_body_size 64k;
    proxy_set_header Host \$sandbox_mcp_notify_host;
    proxy_set_header X-SMCP-Notify-To "";
    proxy_set_header Connection "";
    proxy_ssl_name \$sandbox_mcp_notify_name;
    proxy_connect_timeout 5s;
    proxy_send_timeout 10s;
    proxy_read_timeout 10s;
    error_page 413 = @smcp_too_large;
    error_page 502 504 = @smcp_notify_down;
    proxy_pass \$sandbox_mcp_notify_upstream;
}

location @smcp_notify_down {
    return 502 '$(json_error api_error 'notify: the destination cannot be reached (connection refused, or no answer within 10 s)')';
}
CONF
fi
