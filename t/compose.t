#!/usr/bin/env perl
# docker-compose.yml for real: the images build (from the locally made
# Debian base, no registry), the stack (redis, nginx for /mcp, egress, runner)
# starts under a unique project name, the MCP endpoint answers on the
# published port, and tasks submitted through MCP run to the end in sandbox
# containers the runner (in its container, with the Docker socket) starts
# on per-session networks:
#
#   - the MCP container (nginx) holds no provider key; the egress container
#     (its own nginx instance) does; Redis runs with its memory cap; the
#     runner restarts by policy
#   - a task completes with the fake model's text as its result; its
#     session's network smcp-net-<sessionId> existed with the egress
#     container attached (docker events; the MCP container never) and is
#     gone after the run, as is the sandbox; the session volume
#     smcp-<sessionId> stays; Redis keeps the run across a restart of its
#     container
#   - two tasks of two sessions at once (concurrency 2; the fake model
#     holds both answers until the test lets them go): each sandbox is
#     alone with the egress container (alias `egress`) on its session's
#     internal network; from inside one sandbox the egress proxy answers
#     (run token in, real key out) and nothing else is reachable: not the
#     other sandbox, not the host, not Redis, not the MCP listener, not an
#     outside container, not DNS; then both complete and both networks are
#     removed
#   - a second task of one of those sessions, queued meanwhile, runs after
#     the first one on the session's network made anew, and completes
#   - the warm pool (SMCP_POOL, 1 by default): the runner makes the
#     pool's network smcp-pool-<runner name> (internal) with the egress
#     container on it and a pooled sandbox there, its OpenCode warmed; a
#     run that starts a session takes it, and the sandbox is on its
#     session's network only before the run goes into it; a message sent
#     with opencode_send_message while its agent works is delivered and
#     reaches the model's next request
#   - completion notifications (SMCP_NOTIFY_ALLOW, SMCP_NOTIFY_SECRET): a
#     follow-up's `notify` reaches a receiver on docker0 through the egress
#     container, signed with the secret the runner was given
#   - an upgrade of the egress container in the middle of a run
#     (`docker-compose up -d --force-recreate egress`, as a changed image
#     or provider key recreates it): the runner joins the new container to
#     the running session's network, and the run's next model call goes
#     through it to the end
#   - SMCP_OAUTH=on: the OAuth endpoints, registrations limited per client
#     address (429 past the burst)
#   - package registries (issue 14), SMCP_REGISTRIES=npm with
#     NPM_REGISTRY_URL a stand-in on docker0: the egress container's
#     entrypoint renders the npm route (and no other), nginx -t passes in
#     it, a run token gets the packument rewritten to the egress, pypi (not
#     enabled) 403, PUT 405; SMCP_REGISTRIES=npm,cpan keeps the egress
#     container from starting, naming 'cpan'
#   - the images carry the version (common/smcp_version.h): nginx's
#     /healthz and the runner's --version; the image's smcp-token prints
#     the token alone on stdout (`docker exec`), its jti and expiry on
#     stderr
#
# Cleanup (END, and for runs of this file killed earlier, at start): the
# runner is stopped first, then the sandboxes (label smcp.runner=<project>,
# the runner's name here) and `docker-compose down -v`, then the session
# networks smcp-net-<sessionId> and volumes smcp-<sessionId> of the
# sessions created, the pool's network and the pooled sandboxes' volumes
# (smcp-pool-<hex>) (known here, from the sandboxes' labels, from nginx's
# networks and from the stack's Redis).
#
# Needs a Docker engine, docker-compose (v1) and the sandbox image (built
# here with runner/sandbox/build-image when missing or stale); skipped
# without them, a failure under CI=true.  The first build of the images
# takes a minute or two (apt in the builds); later runs reuse Docker's
# build cache.
#
# Environment: SMCP_TEST_KEEP=1 leaves the stack up (project name printed),
# SMCP_TEST_IMAGE (base image, default smcp-base:bookworm),
# SMCP_SANDBOX_IMAGE (default smcp-sandbox:1.18.33), SMCP_TEST_TAG (tag of
# the three images built here, default test).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Path ();
use File::Spec;
use File::Temp qw(tempdir);
use IO::Select;
use IO::Socket::INET;
use JSON::PP ();
use POSIX ();
use Test::More;
use Time::HiRes qw(time sleep);
use SMCP::Docker qw(:all);
use SMCP::Test qw(json_decode repo_root wait_until rhex prereq_fail which_bin free_port
                  smcp_version);
use SMCP::Fakes;
use SMCP::Receiver;

my $t0 = time();
my $root = repo_root();
my @timings;

##############################################################################
# prerequisites

my $compose_bin = which_bin('docker-compose');
prereq_fail('docker-compose missing (apt-get install docker-compose; .ci/install-deps)')
    unless $compose_bin;
ensure_docker();

# the sandbox image: the runner does not build or pull it
my ($sandbox_image, $image_secs) = ensure_sandbox_image();
push @timings, sprintf('sandbox image (build-image) %.1f s', $image_secs);

# project names carry our PID, so leftovers of a killed run can be swept
my $project = sprintf('smcpt%dr%s', $$, rhex(3));
my $base = base_image();
my $secret = rhex(32);
my $real_key = 'sk-ant-api03-' . rhex(24) . '-REALKEY';
my $tenant = 'alice';
my $nginx_name = "$project-nginx";     # container_name in docker-compose.yml
my $egress_name = "$project-egress";   # ... the runner's SMCP_EGRESS_CONTAINER

# compose reads its settings from the environment, for every command
# (`down` included); settings of the caller must not leak in
delete @ENV{ grep { /^(ANTHROPIC|OPENAI|AZURE_OPENAI|GOOGLE|CF_AIG|COMPAT|GITHUB)_/
                    || /^SMCP_(ALLOWED|PUBLIC|WORKERS|LOG_LEVEL|LISTEN|SANDBOX_|GIT_HOST
                              |CLAIM_IDLE|RUNNER_NAME|CONCURRENCY|REDIS|EGRESS)/x }
             keys %ENV };
$ENV{SMCP_BASE_IMAGE} = $base;
# test-only tags: a real deployment's smcp-*:local built from
# debian:bookworm-slim is never replaced by an image built on the test base
# (SMCP_TEST_TAG: another tag, for parallel runs of different trees)
my $tag = ($ENV{SMCP_TEST_TAG} // '') =~ /^([\w.-]+)$/ ? $1 : 'test';
$ENV{SMCP_NGINX_IMAGE} = "smcp-nginx:$tag";
$ENV{SMCP_REDIS_IMAGE} = "smcp-redis:$tag";
$ENV{SMCP_RUNNER_IMAGE} = "smcp-runner:$tag";
$ENV{SMCP_SANDBOX_IMAGE} = $sandbox_image;
# the runner's name is the sandboxes' label smcp.runner: unique per run of
# this file, so its sandboxes can be found (and swept) by it
$ENV{SMCP_RUNNER_NAME} = $project;
$ENV{SMCP_CONCURRENCY} = 2;
$ENV{SMCP_SANDBOX_MEMORY} = '1g';
# a run held back by its session's earlier run is at worst picked up by
# the runner's XAUTOCLAIM after this long (see the second task of session
# A below): 15 s rather than the default 60 s keeps the test short
$ENV{SMCP_CLAIM_IDLE} = 15000;
$ENV{PROXY_JWT_SECRET} = $secret;
# Redis with a password: redis, both nginx instances and the runner get it
my $redis_password = rhex(16);
$ENV{SMCP_REDIS_PASSWORD} = $redis_password;
$ENV{COMPOSE_INTERACTIVE_NO_CLI} = 1;
delete $ENV{COMPOSE_FILE};

# COMPOSE_PROJECT_NAME as well as -p: the nginx container's name (and the
# runner's SMCP_EGRESS_CONTAINER) derive from it
sub compose_cmd {
    my ($name, $args, %o) = @_;
    local $ENV{COMPOSE_PROJECT_NAME} = $name;
    return run_cmd([$compose_bin, '--ansi', 'never', '-f', "$root/docker-compose.yml",
                    '-p', $name, @$args], timeout => $o{timeout} // 120,
                   (defined $o{stdin} ? (stdin => $o{stdin}) : ()));
}
sub compose { return compose_cmd($project, @_) }

##############################################################################
# what the runner of a project leaves outside the project: sandbox
# containers (label smcp.runner=<project>), the networks smcp-net-<session>
# and the volumes smcp-<session> (both label smcp.session=<session>)

sub uniq { my %s; return grep { !$s{$_}++ } @_ }

# the session ids of a project: its sandboxes' labels, the session networks
# its egress container is still on, and its Redis (when the container still
# runs)
sub project_sessions {
    my ($p) = @_;
    my @s;
    my (undef, $out) = docker('ps', '-a', '--filter', "label=smcp.runner=$p",
                              '--format', '{{.Label "smcp.session"}}');
    push @s, split ' ', $out;
    (undef, $out) = docker('inspect', '--format',
                           '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}',
                           "$p-egress");
    push @s, map { /^smcp-net-(ses_[0-9a-f]+)$/ ? $1 : () } split ' ', $out;
    my ($rc, $keys) = compose_cmd($p, ['exec', '-T', 'redis', 'redis-cli', '--raw',
                                       '--scan', '--pattern', 'smcp:session:ses_*'],
                                  timeout => 30);
    push @s, map { /^smcp:session:(ses_[0-9a-f]+)$/ ? $1 : () } split ' ', $keys
        if $rc == 0;
    return uniq(grep { /^ses_[0-9a-f]+$/ } @s);
}

# sandboxes first (the runner is stopped before: it would start more); a
# pooled one's volume (smcp-pool-<hex>, named) with it
sub remove_sandboxes {
    my ($p, @sessions) = @_;
    my @ids;
    for my $f ("label=smcp.runner=$p", map { "label=smcp.session=$_" } @sessions) {
        my (undef, $out) = docker('ps', '-aq', '--filter', $f);
        push @ids, split ' ', $out;
    }
    @ids = uniq(@ids);
    return unless @ids;
    my (undef, $m) = docker('inspect', '--format', '{{range .Mounts}}{{.Name}} {{end}}', @ids);
    docker({ timeout => 120 }, 'rm', '-f', '-v', @ids);
    my @vols = grep { /^smcp-pool-[0-9a-f]+$/ } split ' ', $m // '';
    docker({ timeout => 60 }, 'volume', 'rm', '-f', @vols) if @vols;
}

# the volumes of sessions whose first run took a pooled sandbox
# (smcp-pool-<hex>: the session's hash names it), while Redis runs
sub session_volumes {
    my ($p, @sessions) = @_;
    my @v;
    for my $s (@sessions) {
        my ($rc, $out) = compose_cmd($p, ['exec', '-T', 'redis', 'redis-cli', '--raw',
                                          'HGET', "smcp:session:$s", 'volume'], timeout => 30);
        push @v, $1 if $rc == 0 && $out =~ /^(smcp-pool-[0-9a-f]+)$/m;
    }
    return @v;
}

# after `down` (the egress container gone from the networks): the session
# networks and volumes, the pool's network and the pooled sessions' volumes
sub remove_session_leftovers {
    my ($p, $pool_vols, @sessions) = @_;
    my ($rc0, undef, $err0) = docker({ timeout => 60 }, 'network', 'rm', "smcp-pool-$p");
    print STDERR "# docker network rm smcp-pool-$p: $err0"
        if $rc0 != 0 && $err0 !~ /not found|No such network/i;
    docker({ timeout => 60 }, 'volume', 'rm', '-f', @$pool_vols) if @$pool_vols;
    for my $s (@sessions) {
        my ($rc, $out, $err) = docker({ timeout => 60 }, 'network', 'rm', "smcp-net-$s");
        print STDERR "# docker network rm smcp-net-$s: $err"
            if $rc != 0 && $err !~ /not found|No such network/i;
        ($rc, $out, $err) = docker({ timeout => 60 }, 'volume', 'rm', '-f', "smcp-$s");
        print STDERR "# docker volume rm smcp-$s: $err" if $rc != 0;
    }
}

# stacks of earlier runs of this file whose process is gone (a zombie
# counts as gone: PID 1 may take a while to reap a test killed with -9)
sub pid_alive {
    my ($pid) = @_;
    return 0 unless kill(0, $pid);
    open(my $fh, '<', "/proc/$pid/stat") or return 1;
    my $stat = <$fh> // '';
    close $fh;
    return $stat =~ /^\d+ \(.*\) Z /s ? 0 : 1;
}

sub sweep_stale_projects {
    my %seen;
    for my $kind (['ps', '-a'], ['network', 'ls'], ['volume', 'ls']) {
        my (undef, $out) = docker(@$kind, '--filter', 'label=com.docker.compose.project',
                                  '--format', '{{.Label "com.docker.compose.project"}}');
        $seen{$_} = 1 for split ' ', $out;
    }
    # sandboxes whose runner (and stack) is already gone
    my (undef, $out) = docker('ps', '-a', '--filter', 'label=smcp.runner',
                              '--format', '{{.Label "smcp.runner"}}');
    $seen{$_} = 1 for grep { /^smcpt\d+r[0-9a-f]+$/ } split ' ', $out;
    for my $p (sort keys %seen) {
        my ($pid) = $p =~ /^smcpt(\d+)r[0-9a-f]+$/ or next;
        next if $pid == $$ || pid_alive($pid);
        compose_cmd($p, ['stop', '-t', '2', 'runner'], timeout => 60);
        my @sessions = project_sessions($p);
        my @pool_vols = session_volumes($p, @sessions);
        remove_sandboxes($p, @sessions);
        # the dead run's own containers still attached to the project's
        # networks would make `down` fail
        my (undef, $nets) = docker('network', 'ls', '-q', '--filter',
                                   "label=com.docker.compose.project=$p");
        for my $net (split ' ', $nets) {
            my (undef, $names) = docker('network', 'inspect', '--format',
                '{{range .Containers}}{{.Name}} {{end}}', $net);
            my @strays = grep { !/^\Q$p\E[_-]/ } split ' ', $names;
            docker({ timeout => 60 }, 'rm', '-f', '-v', @strays) if @strays;
        }
        my ($rc, $o, $err) = compose_cmd($p, ['down', '-v', '--remove-orphans',
                                              '-t', '1']);
        remove_session_leftovers($p, \@pool_vols, @sessions);
        diag("swept stale compose project $p (" . scalar(@sessions) . ' session(s))'
             . ($rc ? ": $err" : ''));
    }
    # the gate directories of killed runs (see the fake model below)
    my $tmp = File::Spec->tmpdir;
    for my $d (glob("$tmp/smcp-compose-gate-*")) {
        my ($pid) = $d =~ m{/smcp-compose-gate-(\d+)-[^/]+$} or next;
        File::Path::remove_tree($d) unless $pid == $$ || pid_alive($pid);
    }
}
sweep_stale_projects();

my @my_containers;     # removed before `down`
my %my_sessions;       # session ids of the runs submitted here
my $stack_started = 0;

END {
    my $status = $?;
    if ($stack_started && $ENV{SMCP_TEST_KEEP}) {
        print STDERR "# SMCP_TEST_KEEP: compose project $project left up "
                   . "(docker-compose -p $project down -v; sandboxes: label "
                   . "smcp.runner=$project; networks smcp-net-*, volumes smcp-ses_* of "
                   . join(' ', sort keys %my_sessions) . ")\n";
    } elsif ($stack_started) {
        if ($status != 0 || !Test::More->builder->is_passing) {
            my (undef, $logs) = compose(['logs', '--no-color', '--tail', '60'],
                                        timeout => 30);
            print STDERR map { "# $_\n" } split /\n/, $logs;
        }
        # the runner first: it would start what is queued
        compose(['stop', '-t', '5', 'runner'], timeout => 60);
        my @sessions = uniq(sort(keys %my_sessions), project_sessions($project));
        my @pool_vols = session_volumes($project, @sessions);
        remove_sandboxes($project, @sessions);
        remove_container($_) for @my_containers;
        my ($rc, $out, $err) = compose(['down', '-v', '--remove-orphans', '-t', '5'],
                                       timeout => 120);
        print STDERR "# docker-compose down failed: $err\n" if $rc != 0;
        # belt and braces: anything of the project still there
        for my $kind (['ps', '-aq'], ['network', 'ls', '-q'], ['volume', 'ls', '-q']) {
            my (undef, $ids) = docker(@$kind, '--filter',
                                      "label=com.docker.compose.project=$project");
            my @ids = split ' ', $ids or next;
            my @rm = $kind->[0] eq 'ps' ? ('rm', '-f', '-v')
                   : ($kind->[0], 'rm');
            docker({ timeout => 60 }, @rm, @ids);
        }
        remove_session_leftovers($project, \@pool_vols, @sessions);
    }
    $? = $status;
}

##############################################################################
# the fake Anthropic API on the host, where the egress container reaches it
# through docker0's address (an ordinary network's way out).  A task with
# a marker GATE-<hex> gets its answer ("done <hex>") only once the test
# opens the gate (the file open-<hex>); the request's arrival is marked
# (reached-<hex>).  A task with HOLD-<hex> gets a bash command that waits
# in the sandbox for /tmp/hold-<hex> (SMCP::Docker::open_gate), then
# "held <hex> done" (its arrival marked reached-<hex> too).  Everything
# else is answered at once.

my $gate_dir = tempdir("smcp-compose-gate-$$-XXXXXX", TMPDIR => 1, CLEANUP => 1);
my $test_pid = $$;
my $gated_turn = sub {
    my ($json) = @_;
    my $s = JSON::PP->new->canonical->encode(ref $json ? $json : {});
    if (my ($h) = $s =~ /\bHOLD-([0-9a-f]{6,})\b/) {
        my $sys = JSON::PP->new->allow_nonref->encode(ref $json ? $json->{system} // '' : '');
        return { text => 'A title' } if $sys =~ /title generator/i;
        if (open(my $fh, '>', "$gate_dir/reached-$h")) { close $fh }
        return { text => "held $h done" } if $s =~ /released-\Q$h\E/;
        return { tool_use => { name => 'bash', input => {
            command => "until [ -e /tmp/hold-$h ]; do sleep 0.3; done; echo released-$h",
            description => 'Wait for the test', timeout => 600000 } } };
    }
    # the latest marker: a continued session's request carries the earlier
    # runs' tasks too
    my @g = $s =~ /\bGATE-([0-9a-f]{6,})\b/g;
    if (my $g = $g[-1]) {
        if (open(my $fh, '>', "$gate_dir/reached-$g")) { close $fh }
        my $until = time() + 180;
        sleep(0.2) until -e "$gate_dir/open-$g" || time() > $until
                         || !kill(0, $test_pid);
        return { text => "done $g" };
    }
    return { text => 'hello from the fake' };
};

my $docker0 = { network_gateway('bridge') }->{gateway};
ok($docker0, "docker0's address is known: " . ($docker0 // '-'))
    or SMCP::Test::give_up('no docker0 address: the fake upstream has nowhere to listen');
my $anthropic = SMCP::Fakes::start_anthropic(addr => $docker0, key => $real_key,
                                             text => 'hello from the fake',
                                             script => [$gated_turn]);
$ENV{ANTHROPIC_API_KEY} = $real_key;
$ENV{ANTHROPIC_BASE_URL} = $anthropic->url;

sub gate_reached { return -e "$gate_dir/reached-$_[0]" }
sub gate_open {
    my ($g) = @_;
    open(my $fh, '>', "$gate_dir/open-$g") or die "gate $g: $!";
    close $fh;
}

# completion notifications: a receiver on docker0 (a private address: the
# prefix names it, as an operator would), the runner signing with
# SMCP_NOTIFY_SECRET
my $notify_secret = rhex(16);
my $rcv = SMCP::Receiver->start(addr => $docker0, secret => $notify_secret);
$ENV{SMCP_NOTIFY_ALLOW} = $rcv->url . '/hooks/';
$ENV{SMCP_NOTIFY_SECRET} = $notify_secret;

# a package registry (issue 14): SMCP_REGISTRIES=npm, its upstream
# NPM_REGISTRY_URL a static stand-in on docker0 like the fake model
my $npm_dir = tempdir("smcp-compose-npm-$$-XXXXXX", TMPDIR => 1, CLEANUP => 1);
my $npm = SMCP::Fakes::start_static(addr => $docker0, root => $npm_dir, kind => 'npm');
SMCP::Test::spew("$npm_dir/smcp-pad/index.json", JSON::PP->new->encode({
    name => 'smcp-pad', versions => { '1.0.0' => { dist => {
        tarball => $npm->url . '/smcp-pad/-/smcp-pad-1.0.0.tgz' } } } }));
$ENV{SMCP_REGISTRIES} = 'npm';
$ENV{NPM_REGISTRY_URL} = $npm->url;
delete @ENV{ grep { /^(PYPI|GOPROXY|GOSUMDB|CRATES|MAVEN|RUBYGEMS|DEBIAN_MIRROR)_/
                    || /^SMCP_REGISTRY_/ } keys %ENV };

# the published MCP port
my $port = free_port();
$ENV{SMCP_LISTEN} = "127.0.0.1:$port";

# the OAuth sign-in (SMCP_OAUTH=on), its per-address limit rendered by the
# nginx container's entrypoint
$ENV{SMCP_OAUTH} = 'on';
delete @ENV{qw(SMCP_OAUTH_RATE SMCP_OAUTH_BURST)};

##############################################################################
# build and start

{
    my $t = time();
    my ($rc, $out, $err) = compose(['build'], timeout => 900);
    my $dt = time() - $t;
    is($rc, 0, sprintf('docker-compose build (%.1f s)', $dt))
        or diag(substr("$out$err", -4000));
    push @timings, sprintf('docker-compose build %.1f s', $dt);

    $t = time();
    $stack_started = 1;    # from here on END takes it down, even half up
    ($rc, $out, $err) = compose(['up', '-d'], timeout => 300);
    $dt = time() - $t;
    is($rc, 0, sprintf('docker-compose up -d (%.1f s)', $dt))
        or SMCP::Test::give_up("docker-compose up failed: $out$err");
    push @timings, sprintf('docker-compose up -d %.1f s', $dt);
}

my $nginx_id = do { my (undef, $o) = compose(['ps', '-q', 'nginx']); chomp $o; $o };
my $egress_id = do { my (undef, $o) = compose(['ps', '-q', 'egress']); chomp $o; $o };
my $redis_id = do { my (undef, $o) = compose(['ps', '-q', 'redis']); chomp $o; $o };
my $runner_id = do { my (undef, $o) = compose(['ps', '-q', 'runner']); chomp $o; $o };
my $backend_net = "${project}_backend";

is(container_inspect_field($nginx_id, '{{.Name}}'), "/$nginx_name",
   "the nginx container is named $nginx_name (COMPOSE_PROJECT_NAME-nginx)");
is(container_inspect_field($nginx_id,
       '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}'), "$backend_net ",
   '... on the backend network only (no shared sandbox network)');
is(container_inspect_field($egress_id, '{{.Name}}'), "/$egress_name",
   "the egress container is named $egress_name (COMPOSE_PROJECT_NAME-egress)");
# the warm pool (SMCP_POOL, 1): the runner makes the pool's network and
# puts the egress container on it, then a pooled sandbox
my $pool_net = "smcp-pool-$project";
ok(wait_until(60, sub { networks_of($egress_id) eq join(' ', sort($backend_net, $pool_net)) }, 0.5),
   "... on the backend network and the warm pool's ($pool_net) only")
    or diag(networks_of($egress_id));
is(container_inspect_field($pool_net, '{{.Internal}} '
       . '{{index .Options "com.docker.network.bridge.inhibit_ipv4"}}') // '', 'true true',
   "$pool_net: internal, inhibit_ipv4");
is(container_inspect_field($egress_id, '{{json .HostConfig.PortBindings}}'), '{}',
   '... publishing nothing');

# only the egress container holds the provider key: not the MCP one (its
# environment, its master's, its rendered configuration)
{
    my $env = container_inspect_field($nginx_id, '{{range .Config.Env}}{{println .}}{{end}}') // '';
    unlike($env, qr/\Q$real_key\E/, 'the MCP container\'s environment holds no provider key');
    unlike($env, qr/^(ANTHROPIC|OPENAI|AZURE_OPENAI|GOOGLE|CF_AIG|COMPAT|GITHUB)_\w+=/m,
           '... nor any provider variable');
    like($env, qr/^SMCP_ROLE=mcp$/m, '... SMCP_ROLE=mcp');
    my ($rc, $out) = compose(['exec', '-T', 'nginx', 'bash', '-c',
        'tr "\\0" "\\n" < /proc/1/environ; cat /run/smcp/nginx.conf'], timeout => 30);
    is($rc, 0, '... (its master\'s environment and nginx.conf read)');
    unlike($out, qr/\Q$real_key\E/, '... its nginx master has no provider key, nor its configuration');
    unlike($out, qr/sandbox_mcp_egress/, '... which has no egress route');
    $env = container_inspect_field($egress_id, '{{range .Config.Env}}{{println .}}{{end}}') // '';
    like($env, qr/^ANTHROPIC_API_KEY=\Q$real_key\E$/m, 'the egress container holds it');
    like($env, qr/^SMCP_ROLE=egress$/m, '... SMCP_ROLE=egress');
    like($env, qr/^SMCP_RESOLVER=127\.0\.0\.11$/m, '... resolving upstreams with Docker\'s DNS');
}

# the runner's container
{
    ok($runner_id, 'the runner container exists');
    is(container_inspect_field($runner_id, '{{.State.Running}}'), 'true', '... and runs');
    is(container_inspect_field($runner_id,
           '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}'), "$backend_net ",
       '... on the backend network only');
    is(container_inspect_field($runner_id, '{{json .HostConfig.PortBindings}}'), '{}',
       '... publishing nothing');
    is(join(' ', sort split ' ', container_inspect_field($runner_id,
             '{{range .Mounts}}{{.Source}}:{{.Destination}}:{{.RW}} {{end}}') // ''),
       '/var/lib/docker/volumes:/var/lib/docker/volumes:false '
       . '/var/run/docker.sock:/var/run/docker.sock:true',
       '... with the Docker socket and, read-only, the volumes (workspace limit) as its '
       . 'only mounts');
    is(container_inspect_field($runner_id, '{{.Config.User}}|{{.HostConfig.ReadonlyRootfs}}|'
           . '{{json .HostConfig.CapDrop}}|{{json .HostConfig.SecurityOpt}}'),
       'root|true|["ALL"]|["no-new-privileges"]',
       '... as root (the socket), read-only root, no capabilities, no-new-privileges');
    my %env = map { /^([^=]+)=(.*)$/s ? ($1 => $2) : () }
              split /\n/, container_inspect_field($runner_id,
                                                  '{{range .Config.Env}}{{println .}}{{end}}') // '';
    is($env{SMCP_EGRESS_CONTAINER}, $egress_name, "... SMCP_EGRESS_CONTAINER=$egress_name");
    is($env{SMCP_EGRESS_URL}, 'http://egress:8090', '... SMCP_EGRESS_URL=http://egress:8090');
    is($env{SMCP_REDIS}, 'redis:6379', '... SMCP_REDIS=redis:6379');
    is($env{SMCP_SANDBOX_IMAGE}, $sandbox_image, "... SMCP_SANDBOX_IMAGE=$sandbox_image");
    ok(!exists $env{SMCP_SANDBOX_DNS}, '... no SMCP_SANDBOX_DNS (Docker\'s DNS answers `egress`)');
    ok(!grep({ index($_, $real_key) >= 0 } values %env),
       '... and no provider key (only the egress container holds them)');
    is(container_inspect_field($runner_id, '{{.HostConfig.RestartPolicy.Name}}'), 'unless-stopped',
       '... restarted by Docker when it exits (restart: unless-stopped)');
    my $logs = '';
    ok(wait_until(30, sub {
        (undef, $logs) = compose(['logs', '--no-color', 'runner'], timeout => 30);
        return $logs =~ /starting: name=\Q$project\E backend=docker concurrency=2/;
    }, 0.5), 'the runner started (its log)') or diag($logs);
}

# the harness's client half (HTTP, MCP, JWT) pointed at the published port;
# nothing of it is started (new() would want a host redis and nginx)
my $mcp = SMCP::Test->client(port => $port, secret => $secret, tenant => $tenant);

# SMCP_OAUTH=on: the OAuth endpoints, and what a client without a token can
# have stored limited per address (oauth-locations.sh in the image)
{
    my $meta = $mcp->http(method => 'GET', path => '/.well-known/oauth-authorization-server');
    is($meta->{status}, 200, 'SMCP_OAUTH=on: the authorization server\'s metadata');
    my $reg = { method => 'POST', path => '/oauth/register',
                headers => [ 'Content-Type' => 'application/json' ],
                body => JSON::PP->new->encode({ redirect_uris => [ 'http://127.0.0.1:9/cb' ] }) };
    my %n;
    $n{ $_->{status} }++ for $mcp->http_keepalive(map { $reg } 1 .. 40);
    ok($n{201} && $n{429}, "... 40 registrations from one address: " . ($n{201} // 0)
                           . ' 201, ' . ($n{429} // 0) . ' 429');
}

# the registry routes of SMCP_REGISTRIES=npm, rendered by the egress
# container's entrypoint: in its configuration, which nginx -t takes, and
# served (rewritten to the egress) to a run token; an unknown registry name
# keeps the egress container from starting, saying which name
{
    my ($rc, $out, $err) = compose(['exec', '-T', 'egress', 'cat',
                                    '/run/smcp/egress-routes.conf'], timeout => 30);
    like($out, qr{location \^?~? ?/registry/npm/}, 'SMCP_REGISTRIES=npm: the egress config has the npm route')
        or diag("$rc $out$err");
    like($out, qr{\Q${\ $npm->url }\E}, '... to NPM_REGISTRY_URL');
    unlike($out, qr{/registry/(pypi|go|crates|maven|rubygems|debian)/},
           '... and no registry that is not enabled');
    ($rc, $out, $err) = compose(['exec', '-T', 'egress', 'nginx', '-t', '-c',
                                 '/run/smcp/nginx.conf'], timeout => 30);
    is($rc, 0, '... nginx -t passes inside the egress container') or diag("$out$err");

    my $run = 'run_' . rhex(12);
    redis_cli('HSET', "smcp:run:$run", tenant => $tenant, status => 'running');
    my $tok = $mcp->token(sub => $tenant, scope => 'egress', run => $run,
                          exp => int(time()) + 300);
    my $curl = sub {
        my ($m, $path) = @_;
        my (undef, $o) = compose(['exec', '-T', 'egress', 'curl', '-s', '-X', $m,
            '-H', "Authorization: Bearer $tok", '-w', '\n%{http_code}',
            "http://egress:8090$path"], timeout => 30);
        return $o // '';
    };
    my $got = $curl->('GET', '/registry/npm/smcp-pad');
    like($got, qr{"tarball":"http://egress:8090/registry/npm/smcp-pad/-/smcp-pad-1\.0\.0\.tgz"[^\n]*\n200\z},
         '... the egress serves the packument, its tarball URL rewritten to the egress')
        or diag($got);
    like($curl->('GET', '/registry/pypi/simple/x/'), qr/\n403\z/, '... pypi (not enabled): 403');
    like($curl->('PUT', '/registry/npm/smcp-pad'), qr/\n405\z/, '... PUT: 405');

    # the container's own words from the engine's log of it: what compose
    # run relays depends on when it attached (a line printed before that
    # is lost to it)
    my $one = "$project-registries-" . rhex(3);
    ($rc, $out, $err) = compose(['run', '--no-deps', '-T', '--name', $one,
                                 '-e', 'SMCP_REGISTRIES=npm,cpan', 'egress'], timeout => 60);
    my (undef, $status) = docker('wait', $one);
    my (undef, $lo, $le) = docker('logs', $one);
    docker('rm', '-f', $one);
    isnt($rc, 0, 'SMCP_REGISTRIES=npm,cpan: the egress container does not start');
    like($status, qr/^[1-9]\d*$/, "... it exited with status $status");
    like("$lo$le", qr/unknown registry 'cpan'/, '... and says which name is unknown')
        or diag("compose: $out$err\ncontainer: $lo$le");
}

# a token from the image's own smcp-token (PROXY_JWT_SECRET of the
# container), through `docker exec` as docker-compose.yml's header says:
# docker-compose v1's exec hands the container's stderr (the token's jti
# and expiry) to its stdout, even with -T
my $token = do {
    my ($rc, $out, $err) = docker('exec', $nginx_name, 'smcp-token',
                                  '--sub', $tenant, '--ttl', '1h');
    is($rc, 0, 'smcp-token in the nginx container mints a token') or diag($err);
    like($err, qr/^jti: [0-9a-f]{32}\nexpires: \S+Z\n\z/, '... its jti and expiry on stderr');
    chomp $out;
    $out;
};
like($token, qr/^[\w-]+\.[\w-]+\.[\w-]+$/, '... a JWT, alone on stdout');

my ($sid, $init);
wait_until(60, sub {
    ($sid, $init) = $mcp->initialize(token => $token);
    return $sid;
}, 0.5);
is($init->{status}, 200, "MCP initialize on the published port 127.0.0.1:$port")
    or diag(explain($init));
ok($sid, '... gives a session id');
is($init->{json}{result}{serverInfo}{name}, 'sandbox-mcp', '... from sandbox-mcp');

{
    my $r = $mcp->rpc($sid, 'tools/list', {}, token => $token,
                      version => $init->{json}{result}{protocolVersion});
    is($r->{status}, 200, 'tools/list: 200');
    my %tools = map { $_->{name} => 1 } @{ $r->{json}{result}{tools} || [] };
    ok($tools{$_}, "tools/list has $_") for qw(opencode_run_task opencode_get_result
                                               opencode_list_runs);

    $r = $mcp->mcp_post($mcp->request_msg('tools/list', {}), token => 'x.y.z');
    is($r->{status}, 401, 'a bad token gets 401');
    $r = $mcp->mcp_post($mcp->request_msg('tools/list', {}), token => $token,
                        host => "evil.example:$port");
    is($r->{status}, 403, 'a foreign Host is refused: 403');
}

{
    my ($rc, $out) = compose(['port', 'nginx', '8080']);
    is($out, "127.0.0.1:$port\n", 'nginx publishes 8080 on 127.0.0.1');
    is(container_inspect_field($nginx_id, '{{json .HostConfig.PortBindings}}'),
       qq({"8080/tcp":[{"HostIp":"127.0.0.1","HostPort":"$port"}]}),
       '... and nothing else');
    is(container_inspect_field($redis_id, '{{json .HostConfig.PortBindings}}'), '{}',
       'redis publishes nothing');
    my (undef, $noauth, $e) = compose(['exec', '-T', 'redis', 'env', 'REDISCLI_AUTH=',
                                       'redis-cli', 'PING'], timeout => 30);
    like("$noauth$e", qr/NOAUTH/, 'redis requires its password (SMCP_REDIS_PASSWORD)')
        or diag("$noauth$e");
}

##############################################################################
# helpers

sub redis_cli {
    my (@args) = @_;
    my ($rc, $out, $err) = compose(['exec', '-T', 'redis', 'redis-cli', '--no-raw', @args],
                                   timeout => 30);
    return $rc == 0 ? $out : "ERROR rc=$rc $err";
}
sub redis_raw {
    my (@args) = @_;
    my ($rc, $out, $err) = compose(['exec', '-T', 'redis', 'redis-cli', '--raw', @args],
                                   timeout => 30);
    chomp $out;
    return $rc == 0 ? $out : "ERROR rc=$rc $err";
}

# opencode_run_task -> structuredContent (its session remembered for END)
sub run_task {
    my (%args) = @_;
    my $res = $mcp->call_tool($sid, 'opencode_run_task', \%args, token => $token);
    my $sc = ($res // {})->{structuredContent} // {};
    $my_sessions{ $sc->{sessionId} } = 1 if ($sc->{sessionId} // '') =~ /^ses_[0-9a-f]+$/;
    diag(explain($res)) unless $sc->{runId};
    return $sc;
}

# opencode_get_result with waitSeconds until the run ended (or $secs passed)
sub wait_result {
    my ($run, $secs) = @_;
    my $until = time() + $secs;
    my $sc = {};
    while (time() < $until) {
        my $w = int($until - time());
        $w = 20 if $w > 20;
        $w = 1 if $w < 1;
        my $res = $mcp->call_tool($sid, 'opencode_get_result',
                                  { runId => $run, waitSeconds => $w },
                                  token => $token, timeout => $w + 15);
        $sc = ($res // {})->{structuredContent} // { error => $res };
        last if ($sc->{status} // '') =~ /^(completed|failed|cancelled)$/;
        sleep(0.5) unless defined $sc->{status};
    }
    return $sc;
}

# the sandbox container of a run (label smcp.run; a pooled one it took:
# named smcp-<runId>), '' when there is none
sub sandbox_of { return run_sandbox($_[0], all => 1) }

# the idle pooled sandboxes of the stack's runner (label smcp.pool)
sub pooled_ids {
    my (undef, $out) = docker('ps', '-q', '--no-trunc', '--filter', "label=smcp.pool=$project",
                              '--filter', 'name=smcp-pool-');
    return split ' ', $out // '';
}

# an idle pooled sandbox whose OpenCode server is warmed, within $secs
sub pool_warm {
    my ($secs) = @_;
    return wait_until($secs, sub {
        for my $id (pooled_ids()) {
            my ($rc) = docker('exec', $id, 'test', '-e', '/tmp/smcp-warm/ready');
            return 1 if $rc == 0;
        }
        return 0;
    }, 0.5);
}

sub network_exists {
    my ($rc) = docker('network', 'inspect', '--format', '{{.Id}}', $_[0]);
    return $rc == 0;
}

# names of the networks a container is on, sorted
sub networks_of {
    my $o = container_inspect_field($_[0],
        '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}') // '';
    return join ' ', sort split ' ', $o;
}

# network events of the engine, from now on, into a file (streamed: the
# engine's own event buffer is small and shared with parallel tests)
my $events_file = "$gate_dir/network-events";
my $events_pid = fork_child(sub {
    open(my $out, '>', $events_file) or die "$events_file: $!";
    $out->autoflush(1);
    my $pid = open(my $ev, '-|', 'docker', 'events', '--since', int(CORE::time()) - 2,
                   '--filter', 'type=network', '--format',
                   '{{.Action}} {{index .Actor.Attributes "name"}} '
                 . '{{index .Actor.Attributes "container"}}')
        or die "docker events: $!";
    # never exit(): that would run the test's END blocks in this copy
    local $SIG{TERM} = sub { kill 'TERM', $pid; POSIX::_exit(0) };
    my $sel = IO::Select->new($ev);
    # until stopped, or the test is gone (killed: then so is this)
    until (orphaned()) {
        next unless $sel->can_read(1);
        my $n = sysread($ev, my $buf, 65536);
        last unless $n;
        print $out $buf;
    }
    kill 'TERM', $pid;
}, 'docker events');

# "Action name container" lines of one network, in order
sub network_events {
    my ($name) = @_;
    open(my $fh, '<', $events_file) or return [];
    my @l = grep { my @f = split ' '; @f >= 2 && $f[1] eq $name } map { chomp; $_ } <$fh>;
    close $fh;
    return \@l;
}

# probe($cid, $host, $port): a TCP connect from inside the container
sub probe { return probe_tcp(@_, read => 0) }

##############################################################################
# a task, start to end: completed with the fake's text, in a sandbox on its
# session's own network, which is gone afterwards

my ($run0, $ses0);
{
    my $t = time();
    my $rt = run_task(task => 'Say hello.', title => 'compose test');
    ($run0, $ses0) = ($rt->{runId} // 'none', $rt->{sessionId} // 'none');
    like($run0, qr/^run_[0-9a-f]{24}$/, 'opencode_run_task gives a runId');
    like($ses0, qr/^ses_[0-9a-f]{24}$/, '... and a sessionId');
    is($rt->{status}, 'started', '... status started');

    like(redis_raw('HGET', "smcp:run:$run0", 'status'), qr/^(started|running|completed)$/,
         'the run is in the Redis container (smcp:run:<id>)');
    is(redis_raw('HGET', "smcp:run:$run0", 'tenant'), $tenant, '... tenant alice');
    # (the runner deletes the entry once the run has ended: a warm
    # sandbox and the fake's answer can end it before this reads)
    my $queued = redis_cli('XRANGE', 'smcp:queue', '-', '+');
    my $claimed = redis_raw('HGET', "smcp:run:$run0", 'claimed_by') // '';
    ok($queued =~ /\Q$run0\E/ || $claimed =~ m{^[^/\s]+/\d+/\S+$},
       '... queued for a runner (smcp:queue), or taken by one already')
        or diag("queue: $queued");
    is(redis_raw('CONFIG', 'GET', 'appendonly'), "appendonly\nyes",
       'redis runs with appendonly yes');
    like(redis_raw('CONFIG', 'GET', 'dir'), qr{^dir\n/data$}, '... in /data');
    is(redis_raw('CONFIG', 'GET', 'maxmemory'), "maxmemory\n1073741824",
       '... maxmemory 1gb (SMCP_REDIS_MAXMEMORY)');
    is(redis_raw('CONFIG', 'GET', 'maxmemory-policy'), "maxmemory-policy\nnoeviction",
       '... maxmemory-policy noeviction');
    like(redis_raw('CONFIG', 'GET', 'client-output-buffer-limit'),
         qr/^client-output-buffer-limit\nnormal 67108864 16777216 60 /,
         '... client-output-buffer-limit normal 64mb 16mb 60');

    my $res = wait_result($run0, 180);
    my $dt = time() - $t;
    is($res->{status}, 'completed', sprintf('the task completed (%.1f s)', $dt))
        or diag(explain($res));
    is($res->{result}, 'hello from the fake', "... with the fake model's text as result");
    push @timings, sprintf('one task, submit -> completed %.1f s', $dt);

    my $req = $anthropic->last_request(path => '/v1/messages');
    is($req && $req->{headers}{'x-api-key'}, $real_key,
       'the fake model saw the real key (added by the egress proxy)');
    like(redis_cli('XRANGE', "smcp:run:$run0:events", '-', '+'), qr/egress/,
         "the model request is audited in the run's event stream");

    ok(wait_until(30, sub { !network_exists("smcp-net-$ses0") }, 0.5),
       "after the run the session's network smcp-net-$ses0 is gone");
    ok(wait_until(30, sub { sandbox_of($run0) eq '' }, 0.5),
       '... and so is the sandbox container');
    # (a session whose first run took a pooled sandbox keeps that one's
    # volume, smcp-pool-<hex>: the session's hash names it)
    my $vol0 = redis_raw('HGET', "smcp:session:$ses0", 'volume');
    $vol0 = "smcp-$ses0" unless $vol0 =~ /^smcp-pool-[0-9a-f]+$/;
    if ($vol0 eq "smcp-$ses0") {
        is(container_inspect_field($vol0, '{{index .Labels "smcp.session"}}'), $ses0,
           "the session volume $vol0 stays (the session's workspace)");
    } else {
        is(container_inspect_field($vol0, '{{.Name}}'), $vol0,
           "the session volume $vol0 (the pooled sandbox's) stays (the session's workspace)");
    }

    my $ev = [];
    wait_until(10, sub { $ev = network_events("smcp-net-$ses0");
                         return grep { /^destroy / } @$ev }, 0.2);
    my @acts = map { (split ' ', $_)[0] } @$ev;
    is($acts[0] // '', 'create', "docker events: smcp-net-$ses0 was created")
        or diag(join "\n", @$ev);
    ok(grep({ /^connect \S+ \Q$egress_id\E/ } @$ev), '... the egress container was connected to it')
        or diag(join "\n", @$ev);
    ok(grep({ /^disconnect \S+ \Q$egress_id\E/ } @$ev), '... and disconnected after the run')
        or diag(join "\n", @$ev);
    ok(!grep({ /\Q$nginx_id\E/ } @$ev), '... the MCP container never') or diag(join "\n", @$ev);
    is($acts[-1] // '', 'destroy', '... and it was removed last') or diag(join "\n", @$ev);
    is(networks_of($egress_id), join(' ', sort($backend_net, $pool_net)),
       'the egress container is back on the backend and pool networks only');
}

##############################################################################
# two tasks of two sessions at once: each sandbox alone with the egress
# container on its session's network; isolation probed from inside sandbox A while the fake
# model holds both answers

my %gate = (A => rhex(4), B => rhex(4));
my (%run, %ses, %sb, %net);
{
    my $t = time();
    for my $x (qw(A B)) {
        my $rt = run_task(task => "Answer briefly. GATE-$gate{$x}", title => "compose $x");
        $run{$x} = $rt->{runId} // 'none';
        $ses{$x} = $rt->{sessionId} // 'none';
        $net{$x} = "smcp-net-$ses{$x}";
        like($run{$x}, qr/^run_[0-9a-f]{24}$/, "task $x queued ($run{$x}, $ses{$x})");
    }
    isnt($ses{A}, $ses{B}, '... in two sessions');

    my $both = wait_until(150, sub { gate_reached($gate{A}) && gate_reached($gate{B}) }, 0.25);
    ok($both, sprintf('both sandboxes run at once and wait for the model (%.1f s)', time() - $t))
        or SMCP::Test::give_up('the two runs did not both reach the model: '
                    . explain([map { wait_result($run{$_}, 1) } qw(A B)]));
    push @timings, sprintf('two tasks, submit -> both waiting on the model %.1f s', time() - $t);
    $sb{$_} = sandbox_of($run{$_}) for qw(A B);
    push @my_containers, grep { length } values %sb;
}

for my $x (qw(A B)) {
    my $n = $net{$x};
    ok($sb{$x}, "sandbox $x found by its label smcp.run=$run{$x}");
    is(container_inspect_field($n, '{{.Internal}} '
           . '{{index .Options "com.docker.network.bridge.inhibit_ipv4"}} '
           . '{{index .Options "com.docker.network.bridge.enable_icc"}} '
           . '{{index .Labels "smcp.session"}}') // '',
       "true true true $ses{$x}",
       "$n: internal, inhibit_ipv4, icc on, labelled with its session");
    my $members = container_inspect_field($n, '{{range .Containers}}{{.Name}} {{end}}') // '';
    is(join(' ', sort split ' ', $members),
       join(' ', sort($egress_name, "smcp-$run{$x}")),
       "... its only members: the egress container and sandbox $x");
    like(container_inspect_field($egress_id,
             qq({{with index .NetworkSettings.Networks "$n"}}{{json .Aliases}}{{end}})) // '',
         qr/"egress"/, '... the egress container on it with the alias egress');
    is(networks_of($sb{$x}), $n, "sandbox $x is on $n only");
}
is(networks_of($egress_id), join(' ', sort($backend_net, $pool_net, $net{A}, $net{B})),
   'egress: backend, the pool\'s and the two session networks');
is(networks_of($nginx_id), $backend_net, 'the MCP container: backend only');

my $sa = $sb{A};
my $egress_a_ip = container_ip($egress_id, $net{A});
my $b_ip = container_ip($sb{B}, $net{B});
my $nginx_backend_ip = container_ip($nginx_id, $backend_net);
my $redis_ip = container_ip($redis_id, $backend_net);
my $backend_gw = { network_gateway($backend_net) }->{gateway};
my $a_gw = { network_gateway($net{A}) }->{gateway};
note("sandbox A ", container_ip($sa, $net{A}), ", egress $egress_a_ip on A, sandbox B $b_ip, "
     . "nginx backend $nginx_backend_ip, redis $redis_ip, backend gateway "
     . ($backend_gw // '-') . ", A's (unheld) gateway " . ($a_gw // '-'));

is(container_inspect_field($sa, '{{.Config.User}} {{.HostConfig.ReadonlyRootfs}} '
       . '{{json .HostConfig.CapDrop}} {{json .HostConfig.SecurityOpt}}'),
   '1000:1000 true ["ALL"] ["no-new-privileges"]',
   'sandbox: user 1000, read-only root, no capabilities, no-new-privileges');
{
    my $envs = container_inspect_field($sa, '{{range .Config.Env}}{{println .}}{{end}}') // '';
    like($envs, qr{^SMCP_EGRESS_URL=http://egress:8090$}m,
         'sandbox: SMCP_EGRESS_URL=http://egress:8090');
    unlike($envs, qr/\Q$real_key\E|\Q$secret\E/, '... no real key, no signing secret');
    unlike(container_inspect_field($sa, '{{range .Mounts}}{{.Source}} {{end}}') // '',
           qr/docker\.sock/, '... and no Docker socket');
}

{
    my ($rc, $out, $err) = exec_in($sa, ['getent', 'hosts', 'egress'], timeout => 10);
    like($out, qr/^\Q$egress_a_ip\E\s+egress/,
         "sandbox A: 'egress' resolves to the egress container on A's network ($egress_a_ip)")
        or diag("rc=$rc $out$err");
}

# the egress proxy from inside sandbox A, with A's own run token
my $msg = '{"model":"claude-probe","max_tokens":64,'
        . '"messages":[{"role":"user","content":"hi"}]}';
{
    # (a pooled sandbox got it after it was made: SMCP::Docker::run_token)
    my $tok = run_token($run{A});
    ok($tok, 'sandbox A has its run token');
    my ($rc, $out, $err) = exec_in($sa, ['bash', '-c',
        'curl -sS --max-time 20 -o /tmp/body -w "%{http_code}" '
      . '-H "x-api-key: $2" -H "anthropic-version: 2023-06-01" '
      . '-H "content-type: application/json" --data-binary "$1" '
      . 'http://egress:8090/anthropic/v1/messages', 'x', $msg, $tok], timeout => 30);
    is($out, '200', 'sandbox A: POST http://egress:8090/anthropic/v1/messages -> 200')
        or diag("rc=$rc $out$err");
    my (undef, $body) = exec_in($sa, ['cat', '/tmp/body']);
    my $j = json_decode($body);
    is(ref $j eq 'HASH' ? $j->{content}[0]{text} : undef, 'hello from the fake',
       "... the fake's answer") or diag($body);

    my $req = $anthropic->last_request(path => '/v1/messages');
    is($req && $req->{json} && $req->{json}{model}, 'claude-probe', '... (the probe request)');
    is($req && $req->{headers}{'x-api-key'}, $real_key, 'the fake saw the real key');
    ok($req && $tok && !grep({ index($_->[1], $tok) >= 0 } @{ $req->{header_list} }),
       '... and never the run token');

    ($rc, $out, $err) = exec_in($sa, ['curl', '-sS', '--max-time', '10', '-o', '/dev/null',
        '-w', '%{http_code}', '-H', 'x-api-key: not-a-token',
        '--data-binary', $msg, 'http://egress:8090/anthropic/v1/messages'], timeout => 20);
    is($out, '401', 'sandbox A: a bad token gets 401 from the proxy') or diag("$out$err");

    ok(wait_until(10, sub { redis_cli('XRANGE', "smcp:run:$run{A}:events", '-', '+')
                                =~ /claude-probe|egress/ }, 0.5),
       'the request is audited in run A\'s event stream');
}

# the things sandbox A must not reach, each with a control showing it is
# really there
my ($host_pid, $host_port) = tcp_listener(addr => '0.0.0.0', port => 0,
                                          reply => "smcp-host-listener\n");
my $outside_net = create_network();
my $outside = run_container(network => $outside_net->{name},
    cmd => ['git', 'daemon', '--export-all', '--base-path=/tmp',
            '--listen=0.0.0.0', '--port=9418', '--reuseaddr']);
push @my_containers, $outside;
my $outside_ip = container_ip($outside, $outside_net->{name});
my $host_ip = host_ip();
# a listener in sandbox B (as its user; a port of its own)
my $b_port = 7777;
docker('exec', '-d', $sb{B}, 'perl', '-MIO::Socket::INET', '-e',
       'my $s = IO::Socket::INET->new(LocalAddr => "0.0.0.0", LocalPort => '
     . $b_port . ', Listen => 5, ReuseAddr => 1) or die $!; '
     . 'while (my $c = $s->accept) { print $c "sandbox-b\n"; close $c }');

# controls
{
    ok(wait_until(15, sub { probe($sb{B}, '127.0.0.1', $b_port)->{connected} }, 0.3),
       "control: sandbox B listens on :$b_port");
    my ($rc, $out, $err) = compose(['exec', '-T', 'egress', 'bash', '-c',
        "exec 3<>/dev/tcp/$b_ip/$b_port && echo CONNECTED"], timeout => 20);
    like($out, qr/CONNECTED/, "control: egress (on B's network too) reaches sandbox B at $b_ip:$b_port")
        or diag("$out$err");
    ok(probe($sa, $egress_a_ip, 8090)->{connected},
       "control: sandbox A reaches the egress listener by address ($egress_a_ip:8090)");
    ok(probe($outside, $docker0, $host_port)->{connected},
       "control: an ordinary container reaches the host listener ($docker0:$host_port)");
    ok(wait_until(15, sub { probe($outside, $outside_ip, 9418)->{connected} }, 0.3),
       "control: the outside stand-in listens on $outside_ip:9418");
    ($rc, $out, $err) = compose(['exec', '-T', 'nginx', 'bash', '-c',
        'exec 3<>/dev/tcp/redis/6379 && echo CONNECTED'], timeout => 20);
    like($out, qr/CONNECTED/, 'control: nginx reaches redis:6379') or diag("$out$err");
    ($rc, $out, $err) = compose(['exec', '-T', 'nginx', 'bash', '-c',
        "exec 3<>/dev/tcp/$nginx_backend_ip/8080 && echo CONNECTED"], timeout => 20);
    like($out, qr/CONNECTED/, "control: the MCP listener is up on $nginx_backend_ip:8080")
        or diag("$out$err");
}

# from inside sandbox A
{
    my $p = probe($sa, $b_ip, $b_port);
    ok(!$p->{connected}, "sandbox A: sandbox B ($b_ip:$b_port, another session) is NOT reachable")
        or diag($p->{out});

    my @host_addrs = grep { defined && length } ($docker0, $backend_gw, $a_gw, $host_ip);
    for my $ip (uniq(@host_addrs)) {
        $p = probe($sa, $ip, $host_port);
        ok(!$p->{connected}, "sandbox A: the host listener via $ip:$host_port is NOT reachable")
            or diag($p->{out});
    }
    $p = probe($sa, $docker0, $anthropic->port);
    ok(!$p->{connected}, 'sandbox A: the real upstream (fake on the host) is NOT reachable directly')
        or diag($p->{out});

    $p = probe($sa, 'redis', 6379);
    ok(!$p->{connected}, 'sandbox A: redis:6379 is NOT reachable') or diag($p->{out});
    $p = probe($sa, $redis_ip, 6379);
    ok(!$p->{connected}, "sandbox A: redis by its address $redis_ip:6379 is NOT reachable")
        or diag($p->{out});

    $p = probe($sa, 'egress', 8080);
    ok(!$p->{connected}, 'sandbox A: nothing but the egress listener on egress (egress:8080)')
        or diag($p->{out});
    $p = probe($sa, $nginx_backend_ip, 8080);
    ok(!$p->{connected}, "sandbox A: the MCP listener ($nginx_backend_ip:8080) is NOT reachable")
        or diag($p->{out});

    $p = probe($sa, $outside_ip, 9418);
    ok(!$p->{connected}, "sandbox A: the outside stand-in $outside_ip:9418 is NOT reachable")
        or diag($p->{out});

    # getent timed inside the sandbox (docker exec's own time is not its):
    # the runner's resolver options (timeout:1 attempts:1) end it within a
    # few seconds, where glibc's own (5 s, twice) would take over 10
    my ($rc, $out, $err) = exec_in($sa, ['bash', '-c', 's=$EPOCHREALTIME; '
        . 'out=$(getent hosts example.com); rc=$?; e=$EPOCHREALTIME; '
        . 'printf "rc=%s start=%s end=%s\n%s" "$rc" "$s" "$e" "$out"'], timeout => 60);
    my ($grc, $s0, $s1, $addr) = $out =~ /^rc=(\d+) start=([\d.]+) end=([\d.]+)\n(.*)\z/s;
    my $dt = defined $s1 ? $s1 - $s0 : -1;
    ok(defined $grc && $grc != 0,
       sprintf('sandbox A: DNS for an outside name fails (rc %s, %.1f s)', $grc // '-', $dt))
        or diag("rc=$rc $out$err");
    is($addr, '', '... no address');
    ok($dt >= 0 && $dt < 8, '... within a few seconds');
    ($rc, $out, $err) = exec_in($sa, ['getent', 'hosts', "smcp-$run{B}"], timeout => 20);
    is($out, '', "... nor a name of the other session's sandbox");

    # inhibit_ipv4: the host has no address on the session's bridge (the
    # IPAM gateway address is held by nobody)
    my $bridge = 'br-' . substr(container_inspect_field($net{A}, '{{.Id}}') // '', 0, 12);
    ($rc, $out, $err) = run_cmd(['ip', '-4', '-o', 'addr', 'show', 'dev', $bridge]);
    ok($rc == 0 && $out !~ /inet /, "the host has no IPv4 address on $bridge ($net{A})")
        or diag("rc=$rc $out$err");
}
stop_child($host_pid);

# a second task of session A, queued while A runs: it starts once A has
# ended, on a network smcp-net-<session A> made again for it (its answer
# needs no gate)
my $gate_a2 = rhex(4);
gate_open($gate_a2);
my $run_a2 = run_task(task => "Once more. GATE-$gate_a2", sessionId => $ses{A})->{runId} // 'none';
like($run_a2, qr/^run_[0-9a-f]{24}$/, "a second task of session A queued ($run_a2)");

# let the model answer: both complete, both networks go
{
    my $t = time();
    gate_open($gate{$_}) for qw(A B);
    for my $x (qw(A B)) {
        my $res = wait_result($run{$x}, 120);
        is($res->{status}, 'completed', "task $x completed") or diag(explain($res));
        is($res->{result}, "done $gate{$x}", "... with its own answer from the fake");
    }
    push @timings, sprintf('gates open -> both completed %.1f s', time() - $t);
    $t = time();
    my $res = wait_result($run_a2, 120);
    is($res->{status}, 'completed', "the second task of session A completed")
        or diag(explain($res));
    is($res->{result}, "done $gate_a2", '... with its answer');
    is($res->{sessionId}, $ses{A}, '... in session A');
    my $a_done = redis_raw('HGET', "smcp:run:$run{A}", 'finished_at');
    my $a2_claimed = redis_raw('HGET', "smcp:run:$run_a2", 'claimed_at');
    ok($a_done =~ /^\d+$/ && $a2_claimed =~ /^\d+$/ && $a2_claimed - $a_done < 5000,
       sprintf('... claimed soon after the first task of session A finished (%s ms)',
               ($a_done =~ /^\d+$/ && $a2_claimed =~ /^\d+$/)
               ? $a2_claimed - $a_done : "$a_done/$a2_claimed"));
    push @timings, sprintf('second task of session A, A completed -> completed %.1f s',
                           time() - $t);
    my $ev = network_events($net{A});
    is(scalar(grep { /^create / } @$ev), 2,
       "$net{A} was made twice (once per run of the session)") or diag(join "\n", @$ev);
    for my $x (qw(A B)) {
        ok(wait_until(30, sub { !network_exists($net{$x}) }, 0.5), "$net{$x} is gone");
        ok(wait_until(30, sub { sandbox_of($run{$x}) eq '' }, 0.5), "... and sandbox $x");
    }
    ok(wait_until(30, sub { sandbox_of($run_a2) eq '' }, 0.5),
       '... and the sandbox of the second task');
    is(networks_of($egress_id), join(' ', sort($backend_net, $pool_net)),
       'the egress container is on the backend and pool networks only again');
    is(networks_of($nginx_id), $backend_net, '... the MCP container still is');
}

##############################################################################
# operations: the healthchecks pass; metrics on the backend network moved

{
    for my $c ([ nginx => $nginx_id ], [ egress => $egress_id ], [ runner => $runner_id ]) {
        my $h = '';
        ok(wait_until(60, sub {
            $h = container_inspect_field($c->[1], '{{.State.Health.Status}}') // '';
            return $h eq 'healthy';
        }, 1), "$c->[0]: healthy (its healthcheck: /healthz, /metrics)") or diag("health: $h");
    }
    my $get = sub {
        my ($svc, $port, $path) = @_;
        my (undef, $out) = compose(['exec', '-T', $svc, 'bash', '-c',
            "exec 3<>/dev/tcp/127.0.0.1/$port; printf 'GET $path HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3"],
            timeout => 30);
        return $out // '';
    };
    like($get->('nginx', 9113, '/metrics'),
         qr/^smcp_mcp_requests_total\{method="tools\/call",tool="opencode_run_task",status="ok"\} [1-9]/m,
         'nginx metrics (9113): the runs started through MCP');
    like($get->('egress', 9113, '/metrics'),
         qr/^smcp_egress_requests_total\{route="anthropic",status="2xx"\} [1-9]/m,
         'egress metrics (9113): the model\'s requests');
    like($get->('runner', 9464, '/metrics'),
         qr/^smcp_runner_runs_total\{outcome="completed"\} [1-9]/m,
         'runner metrics (9464): the completed runs');
    like($get->('nginx', 9113, '/healthz'), qr/"runners":"ok"/,
         'nginx /healthz: the runner\'s heartbeat');
    # the images' binaries: built with common/smcp_version.h
    my $v = smcp_version();
    like($get->('nginx', 9113, '/healthz'), qr/"version":"\Q$v\E"/,
         "nginx /healthz: the version ($v)");
    my (undef, $out) = compose(['exec', '-T', 'runner', 'smcp-runner', '--version']);
    is($out, "smcp-runner $v\n", 'the runner image: smcp-runner --version');
}

##############################################################################
# the warm pool (SMCP_POOL, 1 by default): a run that starts a session
# takes the warmed pooled sandbox, which leaves the pool's network for its
# session's before anything of the run goes into it; a message sent with
# opencode_send_message while its agent works (a command held by the
# test) reaches the model's next request, after the command's result; the
# session's follow-up takes the sandbox held for it (SMCP_SESSION_HOLD)

{
    ok(pool_warm(300), "a pooled sandbox on $pool_net, its OpenCode warmed");
    my ($pooled) = pooled_ids();
    is(container_inspect_field($pool_net, '{{range .Containers}}{{.Name}} {{end}}') =~ /\Q$egress_name\E/
       ? 1 : 0, 1, "... beside the egress container on $pool_net");
    my $h = rhex(4);
    my $rt = run_task(task => "Steer me. HOLD-$h", title => 'compose steer');
    my ($run, $ses) = ($rt->{runId} // 'none', $rt->{sessionId} // 'none');
    ok(wait_until(150, sub { gate_reached($h) }, 0.25), 'the run waits in its command')
        or diag(explain(wait_result($run, 1)));
    my $sb = sandbox_of($run);
    is(substr($sb, 0, 12), substr($pooled // '-', 0, 12), '... in the pooled sandbox');
    push @my_containers, $sb if $sb;
    is(networks_of($sb), "smcp-net-$ses", "... on its session's network only, off $pool_net");
    like(redis_cli('XRANGE', "smcp:run:$run:events", '-', '+'), qr/\\"warm\\":true/,
         '... its agent on the warm OpenCode server');
    my $m = $mcp->call_tool($sid, 'opencode_send_message',
                            { runId => $run, message => "STEERED-$h: also say steered" },
                            token => $token);
    is(($m->{structuredContent} // {})->{status}, 'queued', 'opencode_send_message: queued')
        or diag(explain($m));
    ok(wait_until(60, sub { redis_cli('XRANGE', "smcp:run:$run:events", '-', '+')
                            =~ /delivered/ }, 0.5),
       '... and taken by the sandbox (delivered)');
    ok(open_gate($run, "hold-$h"), 'the command ends (its gate opened)');
    my $res = wait_result($run, 150);
    is($res->{status}, 'completed', 'the steered run completes') or diag(explain($res));
    ok((grep { ($_->{body} // '') =~ /STEERED-\Q$h\E/ }
        @{ $anthropic->requests(path => '/v1/messages') }),
       'the message reached the model');

    # the session's next sandbox, held for it (SMCP_SESSION_HOLD, 120 s)
    # on the pool's network, warm; the follow-up takes it onto the
    # session's network.  Made before the outcome is stored, started
    # just after: running within seconds
    my $held;
    ok(wait_until(30, sub {
        my (undef, $ho) = docker('ps', '-q', '--no-trunc', '--filter', "label=smcp.hold=$ses");
        ($held) = split ' ', $ho // '';
        $held;
    }, 0.2), 'a sandbox held for the session, running');
    $held //= 'none';
    push @my_containers, $held;
    is(networks_of($held), $pool_net, "... waiting on $pool_net");
    my $ft = run_task(task => 'Say hello again.', sessionId => $ses, title => 'compose follow-up',
                      notify => { url => $rcv->url . '/hooks/compose' });
    my $fres = wait_result($ft->{runId} // 'none', 150);
    is($fres->{status}, 'completed', 'the follow-up completes') or diag(explain($fres));
    my $n;
    ok(wait_until(60, sub { ($n) = $rcv->requests(path => '/hooks/compose'); $n }, 0.5),
       "the follow-up's notification reached the receiver (SMCP_NOTIFY_ALLOW)")
        or diag(redis_cli('XRANGE', "smcp:run:" . ($ft->{runId} // 'none') . ':events', '-', '+'));
    $n //= {};
    is(($n->{json} // {})->{runId}, $ft->{runId}, '... naming the run');
    is($n->{sig} // '', 'ok', '... signed with SMCP_NOTIFY_SECRET (the runner\'s)');
    is(substr(redis_raw('HGET', "smcp:run:" . ($ft->{runId} // 'none'), 'container_id') // '-',
              0, 12), substr($held, 0, 12), '... in the held sandbox');
    like(redis_cli('XRANGE', "smcp:run:$ft->{runId}:events", '-', '+'), qr/\\"warm\\":true/,
         '... on its warm OpenCode server');
}

##############################################################################
# an upgrade that recreates the egress container mid-run: the runner joins
# the new one to the running session's network (it joins a session's
# network when the run starts, and a new container is on none)

{
    my $h = rhex(4);
    my $t = time();
    my $rt = run_task(task => "Wait, then answer. HOLD-$h", title => 'compose upgrade');
    my ($run, $ses) = ($rt->{runId} // 'none', $rt->{sessionId} // 'none');
    ok(wait_until(150, sub { gate_reached($h) }, 0.25),
       'a run is under way (its first model call made)') or diag(explain(wait_result($run, 1)));
    my ($rc, $out, $err) = compose(['up', '-d', '--force-recreate', '--no-deps', 'egress'],
                                   timeout => 180);
    is($rc, 0, 'docker-compose up -d --force-recreate egress (an upgrade of it) mid-run')
        or diag("$out$err");
    my $new = do { my (undef, $o) = compose(['ps', '-q', 'egress']); chomp $o; $o };
    isnt($new, $egress_id, '... a new egress container');
    my $nets = '';
    ok(wait_until(60, sub { $nets = networks_of($new); $nets =~ /(^| )smcp-net-\Q$ses\E( |$)/ }, 0.5),
       "the runner joined it to the running session's network smcp-net-$ses")
        or diag("networks of the new egress: $nets");
    like(container_inspect_field($new,
             qq({{with index .NetworkSettings.Networks "smcp-net-$ses"}}{{json .Aliases}}{{end}})) // '',
         qr/"egress"/, '... as egress');
    ok(open_gate($run, "hold-$h"), 'the run goes on (its gate opened)');
    my $res = wait_result($run, 150);
    is($res->{status}, 'completed', 'the run completes through the new egress container')
        or diag(explain($res));
    is($res->{result}, "held $h done", '... with the answer of its model call after the upgrade');
    my (undef, $logs) = compose(['logs', '--no-color', 'runner'], timeout => 30);
    like($logs, qr/run=\Q$run\E.*the egress container \Q$egress_name\E was not on smcp-net-\Q$ses\E \(recreated\): joined it again/,
         'the runner\'s log says so');
    push @timings, sprintf('egress recreated mid-run, submit -> completed %.1f s', time() - $t);
    $egress_id = $new;
}

##############################################################################
# Redis keeps the runs across a restart of its container (AOF on the volume)

{
    my ($rc, $out, $err) = compose(['restart', 'redis'], timeout => 60);
    is($rc, 0, 'docker-compose restart redis') or diag($err);
    my $res;
    ok(wait_until(20, sub {
        $res = $mcp->call_tool($sid, 'opencode_get_result', { runId => $run0 },
                               token => $token);
        return ($res->{structuredContent} // {})->{status};
    }, 0.5), 'opencode_get_result answers after the restart (nginx reconnected)')
        or diag(explain($res));
    is(($res->{structuredContent} // {})->{status}, 'completed', '... the run survived');
    is(($res->{structuredContent} // {})->{result}, 'hello from the fake', '... with its result');
}

stop_child($events_pid);
push @timings, sprintf('test body %.1f s', time() - $t0);
note($_) for @timings;
done_testing();
