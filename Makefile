# sandbox-mcp: build, test and run the stack.
#
#   make            build the dynamic nginx module and the tools
#   make deps       install every apt/npm package the build and tests need
#   make test       deps + build + every test (prove -r t)
#   make up/down    start/stop the local stack (redis, nginx + module,
#                   sandbox network, runner)
#   make sandbox-image   build the sandbox image
#   make token SUB=alice [REPOS=acme/app,acme/*]   mint a bearer token for
#                   tenant "alice" (that may name those repositories)
#   make revoke JTI=<jti or token>   revoke one token in every worker

SHELL      := /bin/bash
NGX_SRC    ?= /usr/share/nginx/src
BUILD      := $(CURDIR)/build
MODULE_SO  := $(BUILD)/ngx_http_sandbox_mcp_module.so
TOKEN_BIN  := $(BUILD)/smcp-token
RUNNER_BIN := $(BUILD)/smcp-runner
RUNNER_SRCS := runner/main.c runner/config.c runner/log.c runner/store.c \
               runner/docker.c runner/logstream.c runner/outcome.c \
               runner/run.c
STATIC_NGX := $(BUILD)/nginx-static/sbin/nginx

MODULE_SRCS := config $(wildcard ngx_sandbox_mcp_module/*.[ch] \
                                 ngx_sandbox_mcp_module/common/*.[ch])
COMMON_SRCS := $(wildcard ngx_sandbox_mcp_module/common/*.c)

CFLAGS     ?= -O2 -g
WARN       := -Wall -Wextra -Wno-unused-parameter -Werror

.PHONY: all module tools runner bench deps test static up down token revoke clean docker-ready sandbox-image

all: module tools runner

module: $(MODULE_SO)
tools: $(TOKEN_BIN)
runner: $(RUNNER_BIN)

# Debian's recipe for out-of-tree dynamic modules: configure a copy of the
# nginx-dev tree with the packaged nginx's own flags (--with-compat), then
# build only the modules.
$(BUILD)/nginx-obj/Makefile: config
	rm -rf $(BUILD)/nginx-src $(BUILD)/nginx-obj
	mkdir -p $(BUILD)
	cp -a $(NGX_SRC) $(BUILD)/nginx-src
	cd $(BUILD)/nginx-src && . ./conf_flags && \
	    ./configure "$${NGX_CONF_FLAGS[@]}" \
	        --add-dynamic-module=$(CURDIR) \
	        --builddir=$(BUILD)/nginx-obj >$(BUILD)/configure.log 2>&1 || \
	    { tail -30 $(BUILD)/configure.log; exit 1; }

$(MODULE_SO): $(BUILD)/nginx-obj/Makefile $(MODULE_SRCS)
	$(MAKE) -C $(BUILD)/nginx-src -f $(BUILD)/nginx-obj/Makefile modules
	@# a new inode: running nginx processes keep the old mapping
	cp $(BUILD)/nginx-obj/ngx_http_sandbox_mcp_module.so $@.tmp
	mv -f $@.tmp $@

$(TOKEN_BIN): runner/smcp_token.c $(COMMON_SRCS) \
              $(wildcard ngx_sandbox_mcp_module/common/*.h)
	mkdir -p $(BUILD)
	$(CC) $(CFLAGS) $(WARN) -Ingx_sandbox_mcp_module/common -o $@ \
	    runner/smcp_token.c $(COMMON_SRCS) -lhiredis -ljansson -lcrypto

$(RUNNER_BIN): $(RUNNER_SRCS) runner/runner.h $(COMMON_SRCS) \
               $(wildcard ngx_sandbox_mcp_module/common/*.h)
	mkdir -p $(BUILD)
	$(CC) $(CFLAGS) $(WARN) -D_GNU_SOURCE -pthread \
	    -Ingx_sandbox_mcp_module/common -Irunner -o $@ \
	    $(RUNNER_SRCS) $(COMMON_SRCS) -lhiredis -ljansson -lcurl -lcrypto

# Upstream nginx sources with the module linked in statically (and the poll
# event module, which Debian's nginx lacks): proves the same `config` serves
# --add-module, and gives the tests a level-triggered event method.
static: $(STATIC_NGX)
$(STATIC_NGX): $(MODULE_SRCS)
	.ci/build-static-nginx $(BUILD)/nginx-static

deps:
	.ci/install-deps

# dockerd and the locally built Debian base image (no registry reachable)
docker-ready:
	.ci/start-dockerd
	.ci/build-base-image

# the sandbox image: OpenCode in a locked-down Debian (cached: rebuilt only
# when its inputs change)
sandbox-image: docker-ready
	runner/sandbox/build-image

test: deps all static docker-ready sandbox-image
	prove -r t

# figures: ratios against a baseline measured in the same run
bench: deps all
	bench/run

up: deps all
	.ci/stack up

down:
	.ci/stack down

# the secret: $$PROXY_JWT_SECRET, else the one `make up` generated
token: $(TOKEN_BIN)
	@$(TOKEN_BIN) --sub "$${SUB:?usage: make token SUB=tenant [TTL=seconds] [REPOS=owner/repo,owner/*]}" \
	    $${TTL:+--ttl $$TTL} $${REPOS:+--repos "$$REPOS"} \
	    $$([ -n "$${PROXY_JWT_SECRET:-}" ] || echo --secret-file $${SMCP_STATE:-$(BUILD)/stack}/secret)

# a token revoked at once in every nginx worker (no secret rotation): JTI is
# the token's jti or the whole token; Redis of `make up` unless REDIS=
revoke: $(TOKEN_BIN)
	@$(TOKEN_BIN) --revoke "$${JTI:?usage: make revoke JTI=jti-or-token [REDIS=host:port] [REDIS_PASSWORD_FILE=path]}" \
	    --redis "$${REDIS:-127.0.0.1:$${SMCP_REDIS_PORT:-6390}}" \
	    $${REDIS_PREFIX:+--prefix "$$REDIS_PREFIX"} \
	    $${REDIS_PASSWORD_FILE:+--redis-password-file "$$REDIS_PASSWORD_FILE"}

clean:
	rm -rf $(BUILD)
