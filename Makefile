# sandbox-mcp: build, test and run the stack.  The targets, one line each
# (`make help` prints these lines, so that the list lives here only):
#
#   make all             the module, smcp-token and smcp-runner (also: make)
#   make module          the dynamic nginx module (build/*.so)
#   make tools           the token tool, build/smcp-token
#   make runner          the runner daemon, build/smcp-runner
#   make runner-test     the runner's test build with its hooks (build/test/)
#   make static          nginx from source with the module built in
#   make deps            install every package: the stack's and the tests'
#   make deps-run        install what building and running the stack needs
#   make test            deps, build, then every file of t/ (t/schedule)
#   make test-asan       only the files make test runs under ASan and UBSan
#   make up-check        what make up needs: root, x86-64, a model key
#   make up              check, deps-run, build, start the stack; URL, token
#   make down            stop what make up started
#   make drain           the runner takes no new run, finishes its runs
#   make backup          secrets, Redis, session volumes to a file [BACKUP=F]
#   make restore         a backup into an empty state: BACKUP=file
#   make token           a token: SUB=alice [REPOS=acme/*] [TTL=30d] [UI=1]
#   make revoke          revoke a token in every worker: JTI=<jti or token>
#   make rotate-secret   make up's keys: a new one signs, the old still verify
#   make retire-secret   make up's keys: KID=<key id> verifies no more
#   make sandbox-image   build the sandbox image (OpenCode, locked down)
#   make docker-ready    start dockerd, build the local Debian base image
#   make bench           the benchmarks: ratios against a baseline (bench/)
#   make soak            runs and faults at once, invariants [SOAK_SECONDS=1200]
#   make fuzz            every libFuzzer harness of fuzz/ for FUZZ_SECONDS
#   make fuzz-ci         each harness briefly; fails on a crash or a report
#   make fuzz-build      build the harnesses (build/fuzz/)
#   make asan            the runner, smcp-token and nginx under ASan+UBSan
#   make asan-tools      the runner and smcp-token of make asan
#   make clean           remove build/ (never the state: refused while up)
#   make help            this list, and the version
#
# make token: a token of tenant SUB that may name the repositories REPOS
# (owner/repo or owner/*, comma separated), valid TTL (30d, 12h, 90m,
# 3600s; default 30d); UI=1: a link to the tenant's dashboard (run list)
# instead.  The version: ngx_sandbox_mcp_module/common/smcp_version.h.

SHELL      := /bin/bash
NGX_SRC    ?= /usr/share/nginx/src
BUILD      := $(CURDIR)/build
ASAN_DIR   := $(BUILD)/asan
MODULE_SO  := $(BUILD)/ngx_http_sandbox_mcp_module.so
TOKEN_BIN  := $(BUILD)/smcp-token
RUNNER_BIN := $(BUILD)/smcp-runner
RUNNER_TEST_BIN := $(BUILD)/test/smcp-runner
RUNNER_SRCS := runner/main.c runner/config.c runner/log.c runner/store.c \
               runner/store_queue.c runner/store_run.c runner/store_event.c \
               runner/store_session.c runner/store_budget.c \
               runner/docker.c runner/logstream.c runner/outcome.c \
               runner/run.c runner/follow.c runner/watchdog.c \
               runner/workspace.c runner/janitor.c \
               runner/notify.c runner/store_notify.c \
               runner/backend.c runner/swarm.c \
               runner/pr.c runner/image.c runner/metrics.c runner/attach.c \
               runner/fork.c runner/pick.c runner/store_pick.c \
               runner/pool.c runner/hold.c runner/spec.c runner/budget.c \
               runner/floor.c \
               runner/relay.c runner/sentinel.c
STATIC_NGX := $(BUILD)/nginx-static/sbin/nginx
# the version, from the one place that defines it
VERSION_H  := ngx_sandbox_mcp_module/common/smcp_version.h
VERSION    := $(shell sed -n 's/^.define SMCP_VERSION *"\([^"]*\)".*/\1/p' $(VERSION_H))

# the Redis scripts module and runner share (one NAME.lua per script, and
# the libraries they include, lib/NAME.lua) and the generator that embeds
# them (and the tool definitions) into C headers
SCRIPTS_DIR := ngx_sandbox_mcp_module/common/scripts
SCRIPTS_LUA := $(wildcard $(SCRIPTS_DIR)/*.lua $(SCRIPTS_DIR)/lib/*.lua)
TOOLS_JSON  := $(wildcard ngx_sandbox_mcp_module/tools/*.json \
                          ngx_sandbox_mcp_module/tools/include/*.json)
UI_FILES    := $(wildcard ngx_sandbox_mcp_module/ui/* \
                          ngx_sandbox_mcp_module/ui/static/* \
                          ngx_sandbox_mcp_module/ui/layouts/*.html)
OAUTH_PAGES := $(wildcard ngx_sandbox_mcp_module/oauth/*.html \
                          ngx_sandbox_mcp_module/oauth/*.css \
                          ngx_sandbox_mcp_module/oauth/layouts/*.html)
EMBED_SRC   := ngx_sandbox_mcp_module/common/embed/smcp_embed.c
EMBED_BIN   := $(BUILD)/smcp-embed

MODULE_SRCS := config config.make $(wildcard ngx_sandbox_mcp_module/*.[ch] \
                                 ngx_sandbox_mcp_module/common/*.[ch]) \
               $(SCRIPTS_LUA) $(TOOLS_JSON) $(UI_FILES) $(OAUTH_PAGES) \
               $(EMBED_SRC)
COMMON_SRCS := $(wildcard ngx_sandbox_mcp_module/common/*.c)

CFLAGS     ?= -O2 -g

# the compilers through ccache where it is installed (make deps installs
# it; make up's deps-run does not): nginx's three builds and the harnesses
# of a clean clone, on a machine that built them before, come from its
# cache (~/.cache/ccache).  Paths are hashed relative to this checkout.
# CCACHE=0: the compilers as they are.
CCACHE     ?= 1
ifeq ($(CCACHE)$(wildcard /usr/lib/ccache/cc),1/usr/lib/ccache/cc)
export PATH            := /usr/lib/ccache:$(PATH)
export CCACHE_BASEDIR  := $(CURDIR)
export CCACHE_NOHASHDIR := 1
endif
WARN       := -Wall -Wextra -Wno-unused-parameter -Werror

.PHONY: all module tools runner runner-test bench soak deps deps-run test static up up-check down drain backup restore token revoke rotate-secret retire-secret clean docker-ready sandbox-image fuzz fuzz-ci fuzz-build asan asan-tools test-asan help

all: module tools runner

module: $(MODULE_SO)
tools: $(TOKEN_BIN)
runner: $(RUNNER_BIN)
runner-test: $(RUNNER_TEST_BIN)

# Debian's recipe for out-of-tree dynamic modules: configure a copy of the
# nginx-dev tree with the packaged nginx's own flags (--with-compat), then
# build only the modules.
$(BUILD)/nginx-obj/Makefile: config config.make
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
              $(wildcard ngx_sandbox_mcp_module/common/*.h) \
              $(BUILD)/smcp_scripts.h
	mkdir -p $(BUILD)
	$(CC) $(CFLAGS) $(WARN) -Ingx_sandbox_mcp_module/common -I$(BUILD) -o $@ \
	    runner/smcp_token.c $(COMMON_SRCS) -lhiredis -ljansson -lcrypto

RUNNER_DEPS := $(RUNNER_SRCS) runner/runner.h runner/store.h $(COMMON_SRCS) \
               $(wildcard ngx_sandbox_mcp_module/common/*.h) \
               $(BUILD)/smcp_scripts.h $(BUILD)/smcp_perl.h
RUNNER_CC    = $(CC) $(CFLAGS) $(WARN) -D_GNU_SOURCE -pthread \
               -Ingx_sandbox_mcp_module/common -Irunner -I$(BUILD)
RUNNER_LINK := $(COMMON_SRCS) -lhiredis -ljansson -lcurl -lcrypto -lm

# the release build: no test hook in it (it refuses SMCP_RUNNER_TEST_*)
$(RUNNER_BIN): $(RUNNER_DEPS)
	mkdir -p $(BUILD)
	$(RUNNER_CC) -o $@ $(RUNNER_SRCS) $(RUNNER_LINK)

# the test build: the same and the hooks of runner/test_hooks.c; never
# installed or put in an image (t/lib/SMCP/Stack.pm starts it on request)
$(RUNNER_TEST_BIN): $(RUNNER_DEPS) runner/test_hooks.c
	mkdir -p $(BUILD)/test
	$(RUNNER_CC) -DRUNNER_TEST_HOOKS -o $@ $(RUNNER_SRCS) \
	    runner/test_hooks.c $(RUNNER_LINK)

# smcp-embed: data files (Lua scripts, tool definitions) checked and
# embedded as C strings; nginx's build makes its own copy (config.make)
$(EMBED_BIN): $(EMBED_SRC)
	mkdir -p $(BUILD)
	$(CC) $(CFLAGS) $(WARN) -o $@ $< -ljansson

# the shared scripts as C strings (smcp_lua_NAME), for the runner and the
# tools: every $(SCRIPTS_DIR)/*.lua, checked for its KEYS/ARGV header, its
# includes of lib/ expanded (t/runner_scripts.t and t/mcp_scripts.t run
# the same text)
$(BUILD)/smcp_scripts.h: $(EMBED_BIN) $(SCRIPTS_DIR) $(SCRIPTS_DIR)/lib \
                         $(SCRIPTS_LUA)
	$(EMBED_BIN) lua $@ $(SCRIPTS_DIR)

# the programs the runner starts in a container of their own (relay.c)
$(BUILD)/smcp_perl.h: $(EMBED_BIN) runner/egress-relay
	$(EMBED_BIN) perl $@ runner/egress-relay

# Upstream nginx sources with the module linked in statically (and the poll
# event module, which Debian's nginx lacks): proves the same `config` serves
# --add-module, and gives the tests a level-triggered event method.
static: $(STATIC_NGX)
$(STATIC_NGX): $(MODULE_SRCS)
	.ci/build-static-nginx $(BUILD)/nginx-static

# the packages: the stack's (deps-run: make up) and the test toolchain's
# (deps: make test, CI), .ci/install-deps' two lists
deps:
	.ci/install-deps

deps-run:
	.ci/install-deps --run

# dockerd and the locally built Debian base image (no registry reachable)
docker-ready:
	.ci/start-dockerd
	.ci/build-base-image

# the sandbox image: OpenCode in a locked-down Debian (cached: rebuilt only
# when its inputs change)
# SMCP_SANDBOX_IMAGE: the tag the tests use too (default smcp-sandbox:<OpenCode's version>)
sandbox-image: docker-ready
	runner/sandbox/build-image $(SMCP_SANDBOX_IMAGE)

# every file of t/ once, TEST_JOBS at a time; t/schedule says which run
# alone (they own the Docker engine or load the machine), which start
# first, and which run against the ASan+UBSan builds
# (t/lib/SMCP/Harness.pm); of the files whose agents start in containers
# (`sandboxes`), TEST_SANDBOX_JOBS at a time (OpenCode's start is what
# loads a 2-core machine)
TEST_JOBS ?= 6
TEST_SANDBOX_JOBS ?= 3
PROVE      = PERL5LIB=$(CURDIR)/t/lib SMCP_TEST_SANDBOX_JOBS=$(TEST_SANDBOX_JOBS) \
             prove --harness SMCP::Harness -j $(TEST_JOBS)

# the builds the tests need, BUILD_JOBS side by side (one per core): the
# compilers, and dockerd's start and the images' builds (on a new machine
# mmdebstrap's downloads) beside them; the packages first
BUILD_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
TEST_NEEDS := all runner-test static asan docker-ready sandbox-image \
              $(ASAN_DIR)/test.env

test: deps
	@$(MAKE) --no-print-directory -j$(BUILD_JOBS) $(TEST_NEEDS)
	SMCP_TEST_SANITIZED_ENV=$(ASAN_DIR)/test.env $(PROVE) -r t

# figures: ratios against a baseline measured in the same run
bench: deps all
	bench/run

# bench/soak's header says what; SOAK_SECONDS, SOAK_RUNS, SOAK_CONCURRENCY,
# SOAK_FAULT_EVERY, SOAK_SEED from the environment
soak: deps all docker-ready sandbox-image
	PERL5LIB=$(CURDIR)/t/lib prove -v bench/soak

# its inputs checked before anything is installed or started
up: up-check deps-run all
	.ci/stack up

up-check:
	.ci/stack check

down:
	.ci/stack down

# before an upgrade, when the runs going on should end on the old runner
# (docs/operations.md); make up then starts the new one
drain:
	.ci/stack drain

# docs/operations.md: the archive holds the signing secret (mode 600)
backup:
	.ci/backup backup $(BACKUP)

restore:
	.ci/backup restore $(BACKUP)

# the key: $$PROXY_JWT_SECRET, else the first of `make up`'s keys; UI=1:
# the tenant's dashboard link (a `ui` token) at $$SMCP_PUBLIC_URL, else at
# $$SMCP_LISTEN (make up's address)
# (set -f: REPOS='*' is a grant, never a file name)
token: $(TOKEN_BIN)
	@set -f; tok=$$($(TOKEN_BIN) --sub "$${SUB:?usage: make token SUB=tenant [TTL=30d] [REPOS=owner/repo,owner/*] [UI=1]}" \
	    $${TTL:+--ttl $$TTL} \
	    $$([ -n "$${UI:-}" ] && echo --scope ui) $${REPOS:+--repos "$$REPOS"} \
	    $$(st=$$(.ci/state dir); [ -n "$${PROXY_JWT_SECRET:-}" ] || \
	       { [ -s "$$st/keys" ] && echo --keys-file "$$st/keys"; } || \
	       echo --secret-file "$$st/secret")) && \
	if [ -n "$${UI:-}" ]; then \
	    echo "$${SMCP_PUBLIC_URL:-http://$${SMCP_LISTEN:-127.0.0.1:8080}}/ui/?token=$$tok"; \
	else echo "$$tok"; fi

# a token revoked at once in every nginx worker (no secret rotation): JTI is
# the token's jti or the whole token; Redis of `make up` (its port and key
# prefix) unless REDIS=, REDIS_PREFIX=
revoke: $(TOKEN_BIN)
	@$(TOKEN_BIN) --revoke "$${JTI:?usage: make revoke JTI=jti-or-token [REDIS=host:port] [REDIS_PASSWORD_FILE=path]}" \
	    --redis "$${REDIS:-127.0.0.1:$${SMCP_REDIS_PORT:-6390}}" \
	    --prefix "$${REDIS_PREFIX:-$${SMCP_REDIS_PREFIX:-smcp:}}" \
	    $$(pw=$${REDIS_PASSWORD_FILE:-$$(.ci/state dir)/redis-password}; \
	       [ -f "$$pw" ] && echo --redis-password-file "$$pw")

# make up's signing keys (docs/operations.md, "Rotating the signing secret"): a new key
# signs, nginx reloaded, the runner restarted (its runs go on); then, once
# the runs the old key signed have ended, the old key retired
rotate-secret: $(TOKEN_BIN)
	@.ci/stack rotate-secret

retire-secret: $(TOKEN_BIN)
	@.ci/stack retire-secret "$${KID:?usage: make retire-secret KID=key-id (the keys: $$(.ci/state dir)/keys)}"

# build/ only: make up's state lives elsewhere (.ci/state dir), and a
# stack that is up keeps its module and binaries
clean:
	@.ci/state clean-check
	rm -rf $(BUILD)

# the "#   make" lines of this file's opening comment
help:
	@echo "sandbox-mcp $(VERSION): make TARGET [VAR=value ...]"
	@sed -n '1,/^$$/s/^#   \(make .*\)/  \1/p' $(firstword $(MAKEFILE_LIST))


# ---------------------------------------------------------------------------
# Fuzzing: libFuzzer harnesses (fuzz/*.c) linking the real sources, built
# with Debian's clang under ASan and UBSan.  Seeds in fuzz/corpus/<harness>/
# (read only), what the fuzzer learns in build/fuzz/corpus/<harness>/,
# crashes in build/fuzz/crashes/<harness>/ (copy them to
# fuzz/regress/<harness>/: t/fuzz_regress.t runs them in `make test`).

FUZZ_CC        ?= clang
FUZZ_SECONDS   ?= 60
FUZZ_CI_SECONDS ?= 10
# harnesses at a time: one per core
FUZZ_JOBS      ?= $(shell nproc 2>/dev/null || echo 1)
# every fuzz/*.c but the driver is a harness; a " * links: FILE..." line in
# its opening comment names the project sources it needs besides common/
FUZZ_HARNESSES ?= $(filter-out driver,$(basename $(notdir $(wildcard fuzz/*.c))))
FUZZ_DIR       := $(BUILD)/fuzz
FUZZ_OBJ       := $(FUZZ_DIR)/obj
FUZZ_SAN       := -fsanitize=fuzzer,address,undefined \
                  -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS    := -g -O1 $(subst fuzzer,fuzzer-no-link,$(FUZZ_SAN)) $(WARN) \
                  -D_GNU_SOURCE -Ingx_sandbox_mcp_module/common -Irunner \
                  -Ifuzz -It/unit
FUZZ_HEADERS   := $(wildcard fuzz/*.h ngx_sandbox_mcp_module/common/*.h) \
                  runner/runner.h t/unit/runner_globals.h
FUZZ_BINS      := $(addprefix $(FUZZ_DIR)/,$(FUZZ_HARNESSES))
# a harness's objects: its own, those its links line names, common/'s
fuzz_objs       = $(patsubst %.c,$(FUZZ_OBJ)/%.o,fuzz/$(1).c $(COMMON_SRCS) \
                    $(shell sed -n 's/^ \* links: //p' fuzz/$(1).c))

fuzz-build: $(FUZZ_BINS)

# each source compiled once for every harness (and through ccache, once
# per machine), then each harness linked
.PRECIOUS: $(FUZZ_OBJ)/%.o
$(FUZZ_OBJ)/%.o: %.c $(FUZZ_HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c -o $@ $<

.SECONDEXPANSION:
$(FUZZ_DIR)/%: $$(call fuzz_objs,$$*)
	$(FUZZ_CC) $(FUZZ_SAN) -o $@ $^ -lhiredis -ljansson -lcrypto

# make fuzz [FUZZ_SECONDS=60] [FUZZ_HARNESSES="jwt utf8"]
fuzz: $(FUZZ_BINS)
	@FUZZ_JOBS=$(FUZZ_JOBS) fuzz/run $(FUZZ_SECONDS) $(FUZZ_HARNESSES)

# bounded: a crash, a leak, a timeout or any sanitizer report fails
fuzz-ci: deps
	@$(MAKE) --no-print-directory -j$(FUZZ_JOBS) fuzz-build
	@FUZZ_JOBS=$(FUZZ_JOBS) fuzz/run $(FUZZ_CI_SECONDS) $(FUZZ_HARNESSES)


# ---------------------------------------------------------------------------
# The tests against ASan+UBSan builds (clang, build/asan/): the runner, the
# token tool, the unit tests and a static nginx with the module built in
# (t/lib/SMCP/Test.pm and Stack.pm take them from SMCP_TEST_*).  A report
# fails the run: in nginx's error.log (workers' stderr goes there) or
# stderr.log (the master's), in a runner's log (SMCP::Test checks them
# all), or in a unit test (it exits non-zero).

ASAN_CC     ?= clang
ASAN_SAN    := -fsanitize=address,undefined -fno-omit-frame-pointer
ASAN_RUNNER := $(ASAN_DIR)/smcp-runner
ASAN_TEST_RUNNER := $(ASAN_DIR)/test/smcp-runner
ASAN_TOKEN  := $(ASAN_DIR)/smcp-token
ASAN_NGX    := $(ASAN_DIR)/nginx-static/sbin/nginx
UBSAN_SUPP  := $(CURDIR)/.ci/ubsan-nginx.supp
# ASan reports end the process; UBSan's go on (each one in the log, every
# log checked) except in the unit tests, built not to recover; leaks are
# reported at exit.  The suppression files hold nginx core's only.  A 16 MB
# quarantine (256 by default) keeps a worker's RSS meaningful for the
# tests that watch it (t/mcp_security.t of issue 7).
ASAN_OPTS   := halt_on_error=1:detect_leaks=1:abort_on_error=0:quarantine_size_mb=16

# the environment of the files t/schedule marks `sanitized`, one VAR=value
# a line (SMCP::Harness reads it)
$(ASAN_DIR)/test.env: Makefile
	mkdir -p $(ASAN_DIR)
	{ echo 'ASAN_OPTIONS=$(ASAN_OPTS)'; \
	  echo 'LSAN_OPTIONS=suppressions=$(CURDIR)/.ci/lsan-nginx.supp'; \
	  echo 'UBSAN_OPTIONS=print_stacktrace=1:suppressions=$(UBSAN_SUPP)'; \
	  echo 'SMCP_TEST_NGINX=$(ASAN_NGX)'; \
	  echo 'SMCP_TEST_RUNNER=$(ASAN_RUNNER)'; \
	  echo 'SMCP_TEST_HOOK_RUNNER=$(ASAN_TEST_RUNNER)'; \
	  echo 'SMCP_TEST_TOKEN_TOOL=$(ASAN_TOKEN)'; \
	  echo 'SMCP_UNIT_CC=$(ASAN_CC)'; \
	  echo 'SMCP_UNIT_CFLAGS=$(ASAN_SAN) -fno-sanitize-recover=undefined'; \
	  echo 'SMCP_UNIT_OUT=$(ASAN_DIR)/unit-tests'; } > $@.tmp
	mv -f $@.tmp $@

asan: asan-tools $(ASAN_NGX)

# the runner (release and test builds) and the token tool by their own
# rules, into build/asan/
asan-tools:
	$(MAKE) --no-print-directory runner runner-test tools BUILD=$(ASAN_DIR) \
	    CC=$(ASAN_CC) CFLAGS="-O1 -g $(ASAN_SAN)"

$(ASAN_NGX): $(MODULE_SRCS)
	.ci/build-static-nginx --asan $(ASAN_DIR)/nginx-static

# only the sanitized files (make test runs them too, once)
test-asan: deps asan docker-ready sandbox-image $(ASAN_DIR)/test.env
	SMCP_TEST_SANITIZED_ENV=$(ASAN_DIR)/test.env SMCP_TEST_SANITIZED_ONLY=1 \
	    $(PROVE) -r t
