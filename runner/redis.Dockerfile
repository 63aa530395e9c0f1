# Redis for sandbox-mcp: the system of record (runs, events, queue), with
# an append-only file on the volume at /data.  Build context: the
# repository root.
#
#   docker build -f runner/redis.Dockerfile -t smcp-redis .
#   docker build --build-arg BASE=smcp-base:bookworm ...   (no registry)
#
# Debian bookworm's redis-server is Redis 7.0.  It listens on every
# interface without a password: only ever attach it to a private network
# (compose: `backend`, never the sandbox networks) and publish no port.

ARG BASE=debian:bookworm-slim
FROM ${BASE}

LABEL smcp.image=redis \
      org.opencontainers.image.title="sandbox-mcp redis" \
      org.opencontainers.image.licenses="BSD-2-Clause"

COPY .ci/install-image-packages /usr/local/sbin/
# Sentinel's option (docker-compose.sentinel.yml, docker-stack.sentinel.yml):
# Redis started in the role the sentinels say, and a sentinel
COPY runner/redis/smcp-redis-start runner/redis/smcp-sentinel-start \
     runner/redis/smcp-sentinel-master /usr/local/bin/
RUN set -eux; \
    install-image-packages redis-server; \
    mkdir -p /data; \
    chown redis:redis /data

VOLUME /data
WORKDIR /data
USER redis
EXPOSE 6379

# appendfsync everysec (the default): at most a second of writes lost on a
# crash of the host; a crash of redis alone loses nothing.  Memory is
# capped, and at the cap writes fail (noeviction) instead of runs
# silently vanishing; a client that does not read its replies (a huge
# XRANGE, a stuck subscriber) is cut off past 64 MB (16 MB for 60 s).
# docker-compose.yml passes the same arguments (SMCP_REDIS_MAXMEMORY).
# docker-compose.yml adds --requirepass when SMCP_REDIS_PASSWORD is set.
CMD ["redis-server", "--bind", "0.0.0.0", "--port", "6379", \
     "--protected-mode", "no", "--dir", "/data", \
     "--appendonly", "yes", "--save", "", \
     "--maxmemory", "1gb", "--maxmemory-policy", "noeviction", \
     "--client-output-buffer-limit", "normal 64mb 16mb 60", \
     "--daemonize", "no", "--logfile", ""]
