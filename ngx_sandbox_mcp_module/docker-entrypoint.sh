#!/bin/bash
# Entry point of the nginx image (ngx_sandbox_mcp_module/Dockerfile): renders
# /run/smcp/nginx.conf (the target of the image's /etc/nginx/nginx.conf
# symlink; /run may be a tmpfs under a read-only root) from the environment,
# then runs the command (default `nginx -g 'daemon off;'`).  Rendered at
# every start, so a restarted container picks up changed settings.
# SMCP_RENDER_CONF=no renders nothing (run nginx with your own `-c FILE`).
#
# One image, two roles (SMCP_ROLE), run as two containers (docker-compose:
# services `nginx` and `egress`):
#   mcp      the MCP endpoint (/mcp).  Holds no provider key and no GitHub
#            token: give this container none.
#   egress   the sandboxes' egress proxy, its own nginx instance with its
#            own workers, connection limits and short timeouts (a sandbox
#            flooding it cannot take /mcp down), and the only container that
#            holds the provider keys.
#
# Settings: the environment (SMCP_ROLE, PROXY_JWT_SECRET,
# PROXY_JWT_SECRET_FILE or PROXY_JWT_KEYS_FILE, SMCP_REDIS, SMCP_REDIS_PREFIX, SMCP_REDIS_PASSWORD,
# SMCP_LOG_FORMAT, SMCP_METRICS_PORT; mcp: SMCP_ALLOWED_HOSTS,
# SMCP_PUBLIC_URL, SMCP_OAUTH, ...; egress: SMCP_EGRESS_PORT, the provider
# keys and GITHUB_TOKEN, read by egress-routes.sh, ...), every one with its
# default in docs/configuration.md ("Read by: the nginx image").  The master
# reads the keys from its environment (the container's) at start; workers
# never see them.
set -euo pipefail

dir=/run/smcp
# the scripts that render the routes and locations that ship (the image's;
# SMCP_CONF_SCRIPTS: another directory of them, the repository's
# ngx_sandbox_mcp_module/conf for the tests)
lib=${SMCP_CONF_SCRIPTS:-/usr/local/lib/smcp}

die() { echo "smcp-nginx-entrypoint: $*" >&2; exit 1; }

# the source address of the default route (the container's address on
# the network that leads out): a UDP connect sends nothing.  perl-base is
# Essential in Debian, so it is there in every Debian-based image.
default_route_addr() {
    perl -MIO::Socket::INET -e '
        my $s = IO::Socket::INET->new(Proto => "udp", PeerAddr => "192.0.2.1",
                                      PeerPort => 9) or exit 1;
        print $s->sockhost, "\n";' 2>/dev/null
}

# the source address towards HOST (the container's address on the
# network that reaches it), as default_route_addr
route_addr() {
    SMCP_TO=$1 perl -MIO::Socket::INET -e '
        my $s = IO::Socket::INET->new(Proto => "udp", PeerAddr => $ENV{SMCP_TO},
                                      PeerPort => 9) or exit 1;
        print $s->sockhost, "\n";' 2>/dev/null
}

# the metrics listener's listen lines (SMCP_METRICS_ADDR)
ops_listens() {
    local port=$1 addr=${SMCP_METRICS_ADDR:-auto} host

    case $addr in
        '*'|0.0.0.0) echo "listen $port;"; return 0 ;;
        auto)
            host=${redis%:*}
            case $redis in
                unix:*) addr=$(default_route_addr) ;;
                *) addr=$(route_addr "$host") || addr=$(default_route_addr) ;;
            esac \
                || die "SMCP_METRICS_ADDR=auto: no route to Redis ($redis) nor a default route (set SMCP_METRICS_ADDR)"
            ;;
        *)
            [[ $addr =~ ^[0-9.]+$|^\[[0-9A-Fa-f:]+\]$ ]] \
                || die "SMCP_METRICS_ADDR=$addr: an address, auto or *"
            ;;
    esac
    echo "listen 127.0.0.1:$port;"
    [ "$addr" = 127.0.0.1 ] || echo "        listen $addr:$port;"
}

# the directives both roles share
common_http() {
    cat <<CONF
    access_log /dev/stdout;
    server_tokens off;
    sandbox_mcp_log_format $log_format;

    sandbox_mcp_redis $redis;
    $prefix
    $secret_conf
    $password_conf
CONF
}

# SMCP_METRICS_PORT: the operations listener, both roles
ops_server() {
    local port=${SMCP_METRICS_PORT:-9113}

    [ "$port" = off ] && return 0
    cat <<CONF

    # operations: Prometheus metrics and health (SMCP_METRICS_PORT)
    server {
        $ops_listen
        location = /metrics {
            sandbox_mcp_metrics;
        }
        location = /healthz {
            sandbox_mcp_health;
        }
        location / {
            return 404;
        }
    }
CONF
}

# SMCP_OAUTH=on: the OAuth server's switch and its locations, or (--http)
# their rate-limit zone (oauth-locations.sh)
oauth_conf() {
    case ${SMCP_OAUTH:-off} in
        on|yes|1) ;;
        off|no|0) return 0 ;;
        *) die "SMCP_OAUTH=$SMCP_OAUTH: on or off" ;;
    esac
    SMCP_OAUTH_LOCATION="sandbox_mcp_allowed_hosts $hosts; $public" \
        "$lib/oauth-locations.sh" "$@" | sed 's/^/        /' \
        || die "oauth-locations.sh failed"
}

render_mcp() {
    local mcp_port mcp_addr hosts listens origins public git_host oauth
    local oauth_http budgets b d v

    mcp_port=${SMCP_MCP_PORT:-8080}
    mcp_addr=${SMCP_MCP_ADDR:-auto}
    hosts=${SMCP_ALLOWED_HOSTS:-localhost 127.0.0.1}

    case $mcp_addr in
        auto)
            mcp_addr=$(default_route_addr) \
                || die "SMCP_MCP_ADDR=auto: no default route (set SMCP_MCP_ADDR)"
            listens="listen 127.0.0.1:$mcp_port;
        listen $mcp_addr:$mcp_port;"
            ;;
        '*'|0.0.0.0) listens="listen $mcp_port;" ;;
        *) listens="listen 127.0.0.1:$mcp_port;
        listen $mcp_addr:$mcp_port;" ;;
    esac

    origins=""
    [ -n "${SMCP_ALLOWED_ORIGINS:-}" ] \
        && origins="sandbox_mcp_allowed_origins $SMCP_ALLOWED_ORIGINS;"
    public=""
    [ -n "${SMCP_PUBLIC_URL:-}" ] && public="sandbox_mcp_public_url $SMCP_PUBLIC_URL;"
    images=""
    if [ -n "${SMCP_IMAGES:-}" ]; then
        [[ $SMCP_IMAGES =~ ^[A-Za-z0-9._/:@\ -]+$ ]] \
            || die "SMCP_IMAGES=$SMCP_IMAGES: want image names"
        images="sandbox_mcp_images $SMCP_IMAGES;"
    fi
    # the agents /mcp offers (SMCP_AGENTS: NAME or NAME=MODEL, space-
    # separated; checked again by nginx -t)
    agents=""
    if [ -n "${SMCP_AGENTS:-}" ]; then
        [[ $SMCP_AGENTS =~ ^[A-Za-z0-9=._/:@\ -]+$ ]] \
            || die "SMCP_AGENTS=$SMCP_AGENTS: want agents (opencode claude-code codex)"
        agents="sandbox_mcp_agents $SMCP_AGENTS;"
    fi
    # where completion notifications may go (the egress checks them again)
    notify=$("$lib/egress-routes.sh" --notify) || die "fix SMCP_NOTIFY_ALLOW"
    git_host=${SMCP_GIT_HOST:-github.com}
    [[ $git_host =~ ^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$ ]] \
        || die "SMCP_GIT_HOST=$git_host: want a host name (ghe.example.com)"
    # a tenant's budgets: the same variables as the runner's --tenant-*
    budgets=""
    for b in "redis_bytes ${SMCP_TENANT_REDIS_BYTES:-}" \
             "sessions ${SMCP_TENANT_SESSIONS:-}" "disk ${SMCP_TENANT_DISK:-}"; do
        read -r d v <<< "$b"
        [ -n "${v:-}" ] || continue
        [[ $v =~ ^[0-9]+[kKmMgG]?$ ]] \
            || die "SMCP_TENANT_${d^^}=$v: want a size (k, m, g)"
        budgets+="sandbox_mcp_tenant_$d $v; "
    done
    oauth=$(oauth_conf)
    oauth_http=$(oauth_conf --http)

    cat <<CONF
# generated by smcp-nginx-entrypoint at container start: edits are lost
# role mcp: /mcp only; no provider key, no GitHub token
load_module modules/ngx_http_sandbox_mcp_module.so;
user www-data;
worker_processes ${SMCP_WORKERS:-auto};
pid /run/nginx.pid;
error_log stderr ${SMCP_LOG_LEVEL:-notice};
events { worker_connections 1024; }
http {
$(common_http)
$oauth_http

    # the MCP endpoint: the published port (backend network) and loopback
    server {
        $listens
        location = /mcp {
            sandbox_mcp;
            sandbox_mcp_allowed_hosts $hosts;
            sandbox_mcp_github_host $git_host;
            $origins
            $public
            $images
            $agents
            $budgets
            $notify
        }
        # the dashboard: the watchUrl's run pages, the tenant's run list
        location /ui/ {
            sandbox_mcp_ui;
            $public
        }
$oauth
        location / {
            return 404;
        }
    }
$(ops_server)
}
CONF
}

render_egress() {
    local eport conns

    eport=${SMCP_EGRESS_PORT:-8090}
    conns=${SMCP_EGRESS_CONNECTIONS:-4096}
    [[ $conns =~ ^[1-9][0-9]*$ ]] || die "SMCP_EGRESS_CONNECTIONS=$conns: want a number"

    "$lib/egress-routes.sh" > "$dir/egress-routes.conf.tmp" \
        || die "egress-routes.sh failed (a provider key without its base URL?)"
    "$lib/egress-routes.sh" --http > "$dir/egress-http.conf.tmp" \
        || die "egress-routes.sh --http failed"
    mv -f "$dir/egress-routes.conf.tmp" "$dir/egress-routes.conf"
    mv -f "$dir/egress-http.conf.tmp" "$dir/egress-http.conf"

    cat <<CONF
# generated by smcp-nginx-entrypoint at container start: edits are lost
# role egress: the sandboxes' only peer, an nginx instance of its own
load_module modules/ngx_http_sandbox_mcp_module.so;
user www-data;
worker_processes ${SMCP_WORKERS:-auto};
worker_rlimit_nofile $(( conns * 2 + 64 ));
pid /run/nginx.pid;
error_log stderr ${SMCP_LOG_LEVEL:-notice};
events { worker_connections $conns; }
http {
$(common_http)

    include $dir/egress-http.conf;

    server {
        listen $eport;
        include $dir/egress-routes.conf;
    }
$(ops_server)
}
CONF
}

# the signing keys' directive into secret_conf: PROXY_JWT_KEYS_FILE, else
# PROXY_JWT_SECRET_FILE, else PROXY_JWT_SECRET
signing_conf() {
    if [ -n "${PROXY_JWT_KEYS_FILE:-}" ]; then
        [[ $PROXY_JWT_KEYS_FILE =~ ^/[A-Za-z0-9._/@+-]+$ ]] \
            || die "PROXY_JWT_KEYS_FILE=$PROXY_JWT_KEYS_FILE: an absolute path of plain characters"
        [ -r "$PROXY_JWT_KEYS_FILE" ] \
            || die "PROXY_JWT_KEYS_FILE=$PROXY_JWT_KEYS_FILE is not readable"
        secret_conf="sandbox_mcp_keys_file $PROXY_JWT_KEYS_FILE;"
    elif [ -n "${PROXY_JWT_SECRET_FILE:-}" ]; then
        [ -r "$PROXY_JWT_SECRET_FILE" ] \
            || die "PROXY_JWT_SECRET_FILE=$PROXY_JWT_SECRET_FILE is not readable"
        secret_conf="sandbox_mcp_secret_file $PROXY_JWT_SECRET_FILE;"
    elif [ -n "${PROXY_JWT_SECRET:-}" ]; then
        secret_conf="sandbox_mcp_secret_env PROXY_JWT_SECRET;"
    else
        die "set PROXY_JWT_SECRET (or PROXY_JWT_SECRET_FILE, PROXY_JWT_KEYS_FILE): the secret that signs every token"
    fi
}

render() {
    local conf=$dir/nginx.conf

    signing_conf
    mkdir -p "$dir"
    redis=${SMCP_REDIS:-redis:6379}
    log_format=${SMCP_LOG_FORMAT:-text}
    case $log_format in
        text|json) ;;
        *) die "SMCP_LOG_FORMAT=$log_format: text or json" ;;
    esac
    [[ ${SMCP_METRICS_PORT:-9113} =~ ^(off|[1-9][0-9]{0,4})$ ]] \
        || die "SMCP_METRICS_PORT=$SMCP_METRICS_PORT: a port number or off"
    prefix=""
    [ -n "${SMCP_REDIS_PREFIX:-}" ] && prefix="sandbox_mcp_redis_prefix $SMCP_REDIS_PREFIX;"
    ops_listen=""
    if [ "${SMCP_METRICS_PORT:-9113}" != off ]; then
        ops_listen=$(ops_listens "${SMCP_METRICS_PORT:-9113}") || exit 1
    fi
    password_conf=""
    [ -n "${SMCP_REDIS_PASSWORD:-}" ] \
        && password_conf="sandbox_mcp_redis_password env:SMCP_REDIS_PASSWORD;"

    case ${SMCP_ROLE:-mcp} in
        mcp) render_mcp > "$conf.tmp" ;;
        egress) render_egress > "$conf.tmp" ;;
        *) die "SMCP_ROLE=${SMCP_ROLE}: mcp or egress" ;;
    esac
    mv -f "$conf.tmp" "$conf"
}

if [ "${SMCP_RENDER_CONF:-yes}" != no ]; then
    render
    case ${SMCP_ROLE:-mcp} in
        mcp) echo "smcp-nginx-entrypoint: rendered $dir/nginx.conf (role mcp, port ${SMCP_MCP_PORT:-8080})" >&2 ;;
        *) echo "smcp-nginx-entrypoint: rendered $dir/nginx.conf (role egress, port ${SMCP_EGRESS_PORT:-8090})" >&2 ;;
    esac
fi

exec "$@"
