#!/bin/bash
# Entry point of the nginx image (ngx_sandbox_mcp_module/Dockerfile): renders
# /run/smcp/nginx.conf (the target of the image's /etc/nginx/nginx.conf
# symlink; /run may be a tmpfs under a read-only root) and the egress routes
# from the environment, then runs the command (default
# `nginx -g 'daemon off;'`).  Rendered at every start, so a restarted
# container picks up changed settings.  SMCP_RENDER_CONF=no renders nothing
# (run nginx with your own `-c FILE`).
#
# Settings (environment, with defaults):
#   PROXY_JWT_SECRET             signing secret (>= the module's minimum
#                                length); read by the nginx master at start
#   PROXY_JWT_SECRET_FILE        or: a file holding it (a Docker secret);
#                                wins over PROXY_JWT_SECRET
#   SMCP_REDIS=redis:6379        host:port or unix:/path of Redis
#   SMCP_REDIS_PREFIX            key prefix (module default smcp:)
#   SMCP_MCP_PORT=8080           the MCP listener
#   SMCP_MCP_ADDR=auto           address it binds, besides 127.0.0.1: `auto`
#                                is the container's address on the network
#                                with the default route (compose: `backend`),
#                                so sandboxes on the internal networks cannot
#                                reach the MCP endpoint; `*` binds all
#   SMCP_ALLOWED_HOSTS="localhost 127.0.0.1"   Host header check (DNS
#                                rebinding): add the name clients use
#   SMCP_ALLOWED_ORIGINS         default: http(s)://<allowed host>:<any port>
#   SMCP_PUBLIC_URL              base of watchUrl links (default: from Host)
#   SMCP_EGRESS=on               the egress listener (off: MCP only)
#   SMCP_EGRESS_PORT=8090        the egress listener, on every interface: the
#                                sandbox networks (also those the runner
#                                connects later) reach it by the alias
#                                `egress`
#   SMCP_WORKERS=auto            worker_processes
#   SMCP_LOG_LEVEL=notice        error_log level
#   provider keys and base URLs (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL,
#   OPENAI_*, AZURE_OPENAI_*, GOOGLE_*, CF_AIG_*, COMPAT_*, GITHUB_TOKEN,
#   GITHUB_URL, GITHUB_API_URL): a route per provider whose key is set, see
#   egress-routes.sh.  The master reads the keys from its environment (the
#   container's) at start; workers never see them.
set -euo pipefail

dir=/run/smcp
conf=$dir/nginx.conf
routes=$dir/egress-routes.conf

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

render() {
    local secret_conf redis mcp_port mcp_addr hosts egress eport
    local listens origins public prefix egress_server

    if [ -n "${PROXY_JWT_SECRET_FILE:-}" ]; then
        [ -r "$PROXY_JWT_SECRET_FILE" ] \
            || die "PROXY_JWT_SECRET_FILE=$PROXY_JWT_SECRET_FILE is not readable"
        secret_conf="sandbox_mcp_secret_file $PROXY_JWT_SECRET_FILE;"
    elif [ -n "${PROXY_JWT_SECRET:-}" ]; then
        secret_conf="sandbox_mcp_secret_env PROXY_JWT_SECRET;"
    else
        die "set PROXY_JWT_SECRET (or PROXY_JWT_SECRET_FILE): the secret that signs every token"
    fi

    mkdir -p "$dir"
    redis=${SMCP_REDIS:-redis:6379}
    mcp_port=${SMCP_MCP_PORT:-8080}
    mcp_addr=${SMCP_MCP_ADDR:-auto}
    hosts=${SMCP_ALLOWED_HOSTS:-localhost 127.0.0.1}
    egress=${SMCP_EGRESS:-on}
    eport=${SMCP_EGRESS_PORT:-8090}

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
    prefix=""
    [ -n "${SMCP_REDIS_PREFIX:-}" ] && prefix="sandbox_mcp_redis_prefix $SMCP_REDIS_PREFIX;"

    egress_server=""
    if [ "$egress" = on ]; then
        /usr/local/lib/smcp/egress-routes.sh > "$routes.tmp" \
            || die "egress-routes.sh failed (a provider key without its base URL?)"
        /usr/local/lib/smcp/egress-routes.sh --http > "$dir/egress-http.conf" \
            || die "egress-routes.sh --http failed"
        mv -f "$routes.tmp" "$routes"
        egress_server="# the egress proxy: the sandboxes' only peer
    include $dir/egress-http.conf;
    server {
        listen $eport;
        include $routes;
    }"
    fi

    cat > "$conf.tmp" <<CONF
# generated by smcp-nginx-entrypoint at container start: edits are lost
load_module modules/ngx_http_sandbox_mcp_module.so;
user www-data;
worker_processes ${SMCP_WORKERS:-auto};
pid /run/nginx.pid;
error_log stderr ${SMCP_LOG_LEVEL:-notice};
events { worker_connections 1024; }
http {
    access_log /dev/stdout;
    server_tokens off;

    sandbox_mcp_redis $redis;
    $prefix
    $secret_conf

    # the MCP endpoint: the published port (backend network) and loopback
    server {
        $listens
        location = /mcp {
            sandbox_mcp;
            sandbox_mcp_allowed_hosts $hosts;
            $origins
            $public
        }
        location / {
            return 404;
        }
    }

    $egress_server
}
CONF
    mv -f "$conf.tmp" "$conf"
}

if [ "${SMCP_RENDER_CONF:-yes}" != no ]; then
    render
    echo "smcp-nginx-entrypoint: rendered $conf (MCP ${SMCP_MCP_PORT:-8080}, egress ${SMCP_EGRESS:-on}:${SMCP_EGRESS_PORT:-8090})" >&2
fi

exec "$@"
