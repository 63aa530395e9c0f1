package SMCP::Stack;

# The whole stack for runner tests, core Perl only: redis + nginx (the
# module's /mcp, and the egress routes of ngx_sandbox_mcp_module/conf/
# egress-routes.sh on the sandbox network's gateway), a runner/sandbox-net
# network, a scripted fake Anthropic and a fake GitHub, the sandbox image,
# and build/smcp-runner processes started (and stopped) by PID.
#
#   use lib 't/lib';
#   use SMCP::Stack;
#   my $s = SMCP::Stack->new(
#       scripts => { 'SCENARIO-X' => [ {tool_use => {...}}, {text => '...'} ] },
#       repos   => { 'owner/repo' => { 'README.md' => "# x\n" } },
#   );
#   my $r = $s->start_runner(concurrency => 2);
#   my $run = $s->run_task(task => 'SCENARIO-X: do it');   # structuredContent
#   my $res = $s->wait_done($run->{runId}, 90);
#   $s->done;
#
# Also: ->events (opencode_get_events, all pages), ->stored_events /
# ->container_events (the Redis stream, with dts), ->tool_output($runId)
# (what its tool calls printed), ->run_hash, ->diag_run
# ($runId, @runners: the run, its events and the runners' logs as diag),
# ->timing($what, $seconds) (printed by ->done), bash_step($cmd, $what),
# ->run_containers, ->docker_events(run => ID) (create/die/destroy times,
# from `docker events` started with the runner), ->stop_runner($r, 'KILL'),
# ->start_docker_forwarder($path) / ->stop_docker_forwarder (a unix-socket
# proxy to /var/run/docker.sock for --docker-socket: "Docker goes away"
# without touching dockerd), SMCP::Stack::four_steps($mark, $d2, $d4) and
# ->check_events_exact($runId, $what) (the stored events of such a run are
# exactly the script's: none lost, none twice).
#
# The fake model plays SMCP::Fakes::scenario_script(scripts): the script
# by the marker (SCENARIO-[A-Z0-9]+) of the latest task, the step by the
# assistant messages since.  Scripts are fixed at new(): the fake runs in
# forked processes.
#
# Everything the runner makes is removed at the end: containers labelled
# smcp.runner=<a runner name of this file> (names embed test_id(), so the
# containers of a test file killed earlier are swept on the next start),
# and the session volumes (smcp-<sessionId>) of the runs this file queued
# and of every session in its Redis.
# Runner processes are stopped by PID (TERM, then KILL).
#
# SMCP_TEST_BACKEND=swarm runs the runners with --backend swarm (the
# engine must be a swarm manager: t/runner_swarm.t makes one): every run
# a service, every session an internal overlay network, which an egress
# relay (runner/egress-relay in a container on the sandbox network,
# forwarding to the egress listener on its gateway) joins as "egress"; the sandboxes reach it at
# http://egress:PORT.  The services and networks go at the end.
#
# SMCP_TEST_RUNNER=PATH runs that runner binary instead of
# build/smcp-runner (make test-asan); the runners' logs are checked for
# sanitizer reports with the nginx logs.  start_runner(test_hooks => 1)
# runs the runner's test build instead, the only one with test hooks
# (SMCP_RUNNER_TEST_*, runner/test_hooks.c): SMCP_TEST_HOOK_RUNNER=PATH,
# else build/test/smcp-runner (`make runner-test`, run here: a no-op when
# it is up to date).  The release build refuses to start with a hook's
# variable set.

use strict;
use warnings;

use Exporter qw(import);
use IO::Select;
use IO::Socket::UNIX;
use POSIX qw(:sys_wait_h setsid);
use Socket qw(SOCK_STREAM);
use Test::More ();
use Time::HiRes qw(time sleep);

use SMCP::Test qw(json_encode json_decode wait_until rhex prereq_fail);
use SMCP::Docker qw(ensure_docker ensure_sandbox_image docker test_id sandbox_net_up
                    fork_child orphaned stop_child);
use SMCP::Events qw(kinds step_totals describe_events);
use SMCP::Fakes;

our @EXPORT_OK = qw(bash_step gate_step);

my @STACKS;

# new(scripts => {MARK => [steps]}, repos => {'o/r' => {path => content}},
#     workers => 2, location => '...' (extra /mcp directives),
#     server => '...' (more in the server: location /ui/ { sandbox_mcp_ui; }),
#     http => '...' (more in the http{}),
#     anthropic => {extra start_anthropic options},
#     github => {extra start_github options, e.g. web_base},
#     github_api_path => '/api/v3' (GITHUB_API_URL is the fake's URL with
#                   it: GitHub Enterprise's shape),
#     egress_env => {NAME => value} (more routes: other providers' keys and
#                   base URLs, e.g. OPENAI_API_KEY, OPENAI_BASE_URL, in the
#                   environment egress-routes.sh and nginx see; never in
#                   the runner's),
#     sentinel => 1 (Redis Sentinel: the test's Redis a master with a
#                   replica and three sentinels, SMCP::Sentinel; nginx and
#                   the runners given sentinel://...; ->sentinel))
sub new {
    my ($class, %o) = @_;
    my $self = bless { owner => $$, runners => {}, names => {}, sessions => {},
                       events_pids => {}, t0 => time() }, $class;
    push @STACKS, $self;

    my $t = $self->{t} = SMCP::Test->new(workers => $o{workers} // 2,
                                         ($o{location} ? (location => $o{location}) : ()),
                                         ($o{server} ? (server => $o{server}) : ()),
                                         ($o{redis_appendonly} ? (redis_appendonly => 1) : ()));
    ensure_docker(root => 1);

    my $root = SMCP::Test::repo_root();
    $self->{runner_bin} = $ENV{SMCP_TEST_RUNNER} || "$root/build/smcp-runner";
    prereq_fail("runner $self->{runner_bin} missing (run `make`)") unless -x $self->{runner_bin};

    (my $image, my $secs) = ensure_sandbox_image();
    $self->{image} = $image;
    Test::More::note(sprintf('build-image: %.2f s', $secs));
    $self->_sweep_stale_runner_containers;

    # the fakes
    my %real = (
        ANTHROPIC_API_KEY => 'sk-ant-api03-REAL-' . rhex(),
        GITHUB_TOKEN      => 'ghp_REAL' . rhex(),
    );
    $self->{real} = \%real;
    my $script = SMCP::Fakes::scenario_script($o{scripts} || {}, title => 'Runner test');
    $self->{anthropic} = SMCP::Fakes::start_anthropic(key => $real{ANTHROPIC_API_KEY},
        script => [$script], deltas => 3, %{ $o{anthropic} || {} });
    $self->{github} = SMCP::Fakes::start_github(token => $real{GITHUB_TOKEN},
                                                %{ $o{github} || {} });
    for my $repo (sort keys %{ $o{repos} || {} }) {
        $self->{github}->create_repo($repo, files => $o{repos}{$repo});
    }

    # the sandbox network, the egress routes on its gateway
    my $eport = $self->{egress_port} = $t->free_port;
    my $net = $self->{net} = sandbox_net_up(egress_port => $eport);
    my $gw = $self->{gateway} = $net->{gateway};
    $self->{egress_url} = "http://$gw:$eport";
    Test::More::note("sandbox network $net->{name} ($net->{subnet}), egress $self->{egress_url}");
    $self->_swarm_relay if backend() eq 'swarm';

    delete @ENV{qw(OPENAI_API_KEY OPENAI_BASE_URL AZURE_OPENAI_API_KEY AZURE_OPENAI_BASE_URL
                   GOOGLE_API_KEY GOOGLE_BASE_URL CF_AIG_TOKEN CF_AIG_BASE_URL
                   COMPAT_API_KEY COMPAT_BASE_URL)};
    $ENV{$_} = $real{$_} for keys %real;
    $self->{egress_env} = { %{ $o{egress_env} || {} } };
    $ENV{$_} = $self->{egress_env}{$_} for keys %{ $self->{egress_env} };
    $ENV{ANTHROPIC_BASE_URL} = $self->{anthropic}->url;
    $ENV{GITHUB_URL} = $self->{github}->url;
    $ENV{GITHUB_API_URL} = $self->{github}->url . ($o{github_api_path} // '');
    $t->render_routes;

    if ($o{sentinel}) {
        # the test's Redis the master of a replica and three sentinels;
        # nginx and the runners find it through them
        require SMCP::Sentinel;
        $t->start_redis;
        $self->{sentinel} = SMCP::Sentinel->new(t => $t);
        $t->{redis_addr} = $self->{sentinel}->addr;
        Test::More::note('redis through sentinel: ' . $t->{redis_addr});
    }

    $t->start(http => ($o{http} // '') . SMCP::Test::egress_server_conf("$gw:$eport"));
    # a worker reaches Redis after nginx's start (through the sentinels: a
    # lookup first, slow on a loaded machine): its 503 "retry shortly" is
    # retried, as a client does
    my ($sid, $r);
    wait_until(60, sub {
        ($sid, $r) = $t->initialize;
        return $sid || ($r->{status} // 0) != 503;
    }, 0.5);
    $self->{sid} = $sid;
    if (!$sid) {
        my @errs = grep { /\[(error|crit|alert|emerg)\]/ }
                   split /\n/, SMCP::Test::slurp($t->dir . '/error.log') // '';
        splice(@errs, 0, @errs - 3) if @errs > 3;
        die sprintf("MCP initialize failed: HTTP %s %.200s; error.log: %s\n",
                    $r->{status} // '?', $r->{body} // '', join(' | ', @errs));
    }
    Test::More::note(sprintf('stack up in %.2f s', time() - $self->{t0}));
    return $self;
}

SMCP::Test::accessors(qw(t anthropic github net gateway egress_port egress_url image sid real
                         sentinel));

# the backend the runners use: docker (default) or swarm
sub backend { return $ENV{SMCP_TEST_BACKEND} || 'docker' }

# swarm: the relay that stands in for the egress on the session networks
sub _swarm_relay {
    my ($self) = @_;
    my (undef, $state) = docker('info', '--format', '{{.Swarm.LocalNodeState}}');
    prereq_fail("SMCP_TEST_BACKEND=swarm: the engine is in no swarm ($state)")
        unless $state =~ /active/;
    my $port = $self->{egress_port};
    my $name = $self->{relay} = 'smcp-relay-' . test_id();
    SMCP::Docker::egress_relay_up($self->{net}, port => $port, name => $name,
                                  image => SMCP::Docker::base_image());
    $self->{egress_url} = "http://egress:$port";
    Test::More::note("swarm backend: egress relay $name, $self->{egress_url}");
}

##############################################################################
# runner processes

# the default runner name of this file: rt-<test_id()>
sub runner_name { return 'rt-' . test_id() }

# start_runner(name => N, concurrency => 2, claim_idle => 3000,
#   docker_socket => PATH, args => [...], env => {VAR => value},
#   test_hooks => 1 (the test build: env may set SMCP_RUNNER_TEST_*),
#   argv => [...] (these flags and --name alone, none of this stack's: a
#   deployment's own, e.g. docker-stack.yml's))
#   -> { pid, name, log }
sub start_runner {
    my ($self, %o) = @_;
    my $t = $self->{t};
    my $name = $o{name} // $self->runner_name;
    $self->{names}{$name} = 1;
    $self->_watch_docker_events($name);
    my $log = $t->dir . "/runner-$name.log";
    $t->watch_log($log);
    my $bin = $o{test_hooks} ? $self->hook_runner_bin : $self->{runner_bin};
    my @cmd = $o{argv} ? ($bin, @{ $o{argv} }, '--name', $name) : ($bin,
        '--redis', $self->{sentinel} ? $self->{sentinel}->addr
                                     : '127.0.0.1:' . $t->redis_port,
        '--secret-file', $t->secret_file,
        '--image', $self->{image},
        '--network', $self->{net}{name},
        '--egress-url', $self->{egress_url},
        ($self->{relay}
         ? ('--backend', 'swarm', '--egress-container', $self->{relay})
         : ('--dns', $self->{gateway})),
        '--name', $name,
        '--concurrency', $o{concurrency} // 2,
        '--claim-idle', $o{claim_idle} // 3000,
        '--memory', $o{memory} // '1g',
        (defined $o{docker_socket} ? ('--docker-socket', $o{docker_socket}) : ()),
        @{ $o{args} || [] });
    # the runner needs no upstream credential: only nginx holds them
    local %ENV = %ENV;
    delete @ENV{keys %{ $self->{real} }, keys %{ $self->{egress_env} || {} }};
    @ENV{keys %{ $o{env} || {} }} = values %{ $o{env} || {} };
    my ($pid, $guard) = _guarded_exec(\@cmd, $log);
    my $r = { pid => $pid, guard => $guard, name => $name, log => $log, started => time() };
    $self->{runners}{$pid} = $r;
    # up: it logs its start line at once
    wait_until(30, sub { $self->runner_log($r) =~ /starting/ });
    return $r;
}

# the runner's test build (see the header)
sub hook_runner_bin {
    my ($self) = @_;
    return $self->{hook_runner_bin} //= do {
        my $bin = $ENV{SMCP_TEST_HOOK_RUNNER};
        if (!$bin) {
            my $root = SMCP::Test::repo_root();
            my $out = `make -s -C '$root' runner-test 2>&1`;
            prereq_fail("`make runner-test` failed: $out") if $?;
            $bin = "$root/build/test/smcp-runner";
        }
        prereq_fail("the runner's test build $bin missing (run `make runner-test`)")
            unless -x $bin;
        $bin;
    };
}

# stop_runner($r, 'TERM'|'KILL'): signals the runner, waits until it is gone
# wait_pool_warm($runner, $timeout): true once a pooled sandbox of the
# runner (--pool) is warm: its OpenCode server started and prompted once
sub wait_pool_warm {
    my ($self, $r, $timeout) = @_;
    return wait_until($timeout // 300, sub {
        my (undef, $out) = docker('ps', '--no-trunc', '--filter', "label=smcp.pool=$r->{name}",
                                  '--format', '{{.ID}} {{.Names}}');
        my ($id) = map { (split ' ')[0] } grep { / smcp-pool-/ } split /\n/, $out // '';
        return 0 unless $id;
        my ($rc) = docker('exec', $id, 'test', '-e', '/tmp/smcp-warm/ready');
        return $rc == 0 ? 1 : 0;
    }, 0.5);
}

sub stop_runner {
    my ($self, $r, $sig) = @_;
    my $pid = $r->{pid};
    return unless $pid && delete $self->{runners}{$pid};
    kill($sig // 'TERM', $pid);
    return if _wait_guard($r->{guard}, 10);
    Test::More::diag("runner $pid did not stop on SIG" . ($sig // 'TERM') . ': KILL');
    kill 'KILL', $pid;
    _wait_guard($r->{guard}, 10);
}

sub runner_alive {
    my ($self, $r) = @_;
    my $w = waitpid($r->{guard}, WNOHANG);
    return 0 if $w == $r->{guard} || $w == -1;
    return 1;
}

# a command run by a small guardian process (its own session): the
# guardian ends when the command ends, and stops the command (TERM, then
# KILL) when the test process goes away without cleaning up (kill -9).
# Returns (the command's pid, the guardian's pid).
sub _guarded_exec {
    my ($cmd, $out) = @_;
    my $parent = $$;
    pipe(my $rd, my $wr) or die "pipe: $!";
    my $guard = fork();
    die "fork: $!" unless defined $guard;
    if ($guard == 0) {
        close $rd;
        setsid();
        $SIG{$_} = 'DEFAULT' for qw(INT HUP PIPE);
        my $pid = fork();
        POSIX::_exit(1) unless defined $pid;
        if ($pid == 0) {
            close $wr;
            open(STDIN, '<', '/dev/null');
            open(STDOUT, '>>', $out) or POSIX::_exit(127);
            open(STDERR, '>&', \*STDOUT) or POSIX::_exit(127);
            exec(@$cmd) or POSIX::_exit(127);
        }
        syswrite($wr, "$pid\n");
        close $wr;
        $SIG{TERM} = sub { kill 'TERM', $pid };
        while (1) {
            my $w = waitpid($pid, WNOHANG);
            POSIX::_exit(0) if $w == $pid || $w == -1;
            if (getppid() != $parent) {
                kill 'TERM', $pid;
                for (1 .. 50) { last if waitpid($pid, WNOHANG) == $pid; sleep(0.1) }
                kill 'KILL', $pid;
                waitpid($pid, 0);
                POSIX::_exit(0);
            }
            sleep(0.1);
        }
    }
    close $wr;
    my $line = <$rd>;
    close $rd;
    my ($pid) = ($line // '') =~ /^(\d+)/ or die "could not start @$cmd\n";
    return ($pid, $guard);
}

sub _wait_guard {
    my ($guard, $timeout) = @_;
    my $deadline = time() + $timeout;
    while (time() < $deadline) {
        my $w = waitpid($guard, WNOHANG);
        return 1 if $w == $guard || $w == -1;
        sleep(0.02);
    }
    return 0;
}

sub runner_log {
    my ($self, $r) = @_;
    return $self->{t}->read_file($r->{log});
}

# the runner's log, for diag: the last $n lines
sub runner_log_tail {
    my ($self, $r, $n) = @_;
    my @l = split /\n/, $self->runner_log($r);
    $n //= 40;
    @l = @l[-$n .. -1] if @l > $n;
    return join("\n", @l);
}

##############################################################################
# docker events of a runner's containers (to time create/die/destroy)

sub _watch_docker_events {
    my ($self, $name) = @_;
    return if $self->{events_pids}{$name};
    my $file = $self->{t}->dir . "/docker-events-$name.jsonl";
    # --since a moment before: what happens before the subscription is up
    # comes first, from the engine's buffer (no sleep that hopes it is up)
    my $since = sprintf('%.3f', time() - 1);
    my ($pid, $guard) = _guarded_exec([$ENV{DOCKER} // 'docker', 'events', '--since', $since,
        '--filter', 'type=container', '--filter', "label=smcp.runner=$name",
        '--format', '{{json .}}'], $file);
    $self->{events_pids}{$name} = [$pid, $file, $guard];
}

# docker_events(run => ID) -> ({action, id, time (epoch float), run}, ...)
sub docker_events {
    my ($self, %f) = @_;
    my @ev;
    for my $n (sort keys %{ $self->{events_pids} }) {
        my $c = $self->{t}->read_file($self->{events_pids}{$n}[1]);
        for my $l (split /\n/, $c) {
            my $j = json_decode($l) or next;
            my $attr = $j->{Actor}{Attributes} || {};
            my $e = { action => $j->{Action} // $j->{status}, id => $j->{id} // $j->{Actor}{ID},
                      time => ($j->{timeNano} // 0) / 1e9, run => $attr->{'smcp.run'} };
            next if defined $f{run} && ($e->{run} // '') ne $f{run};
            push @ev, $e;
        }
    }
    return sort { $a->{time} <=> $b->{time} } @ev;
}

##############################################################################
# a Docker socket forwarder (Docker "going away" without touching dockerd)

# start_docker_forwarder($path, drop => qr/^GET .../, times => N) -> pid.
# Listens on $path, forwards each connection to /var/run/docker.sock; stop
# it with stop_docker_forwarder (every connection through it is closed at
# once).  drop: the first N connections (1) whose request matches are
# closed unanswered (an engine that does not answer that call).
sub start_docker_forwarder {
    my ($self, $path, %o) = @_;
    my $drops = $o{drop} ? ($o{times} // 1) : 0;
    unlink $path;
    my $srv = IO::Socket::UNIX->new(Type => SOCK_STREAM, Local => $path, Listen => 64)
        or die "forwarder: listen on $path: $!\n";
    my $pid = fork_child(sub {
        my $sel = IO::Select->new($srv);
        my (%peer, %obj, %first);
        until (orphaned()) {
            my @ready = $sel->can_read(1);
            for my $fh (@ready) {
                next unless $fh == $srv || $obj{"$fh"};
                if ($fh == $srv) {
                    my $c = $srv->accept or next;
                    my $d = IO::Socket::UNIX->new(Type => SOCK_STREAM,
                                                  Peer => '/var/run/docker.sock');
                    if (!$d) { close $c; next }
                    $peer{"$c"} = $d; $peer{"$d"} = $c;
                    $obj{"$c"} = $c; $obj{"$d"} = $d;
                    $first{"$c"} = 1;
                    $sel->add($c, $d);
                    next;
                }
                my $p = $peer{"$fh"};
                my $n = sysread($fh, my $buf, 65536);
                my $ok = $n;
                if ($ok && delete $first{"$fh"} && $drops > 0 && $buf =~ $o{drop}) {
                    $drops--;
                    $ok = 0;
                }
                while ($ok && length $buf) {
                    my $w = syswrite($p, $buf);
                    if (!defined $w) { $ok = 0; last }
                    substr($buf, 0, $w, '');
                }
                if (!$ok) {
                    $sel->remove($fh, $p);
                    delete @obj{"$fh", "$p"};
                    delete @peer{"$fh", "$p"};
                    close $fh;
                    close $p;
                }
            }
        }
    }, "docker socket forwarder $path");
    close $srv;
    return $pid;
}

sub stop_docker_forwarder {
    my ($self, $pid, $path) = @_;
    stop_child($pid);
    # the socket file stays: connecting to it is refused (ECONNREFUSED)
}

##############################################################################
# MCP

sub call {
    my ($self, $tool, $args, %o) = @_;
    return $self->{t}->call_tool($self->{sid}, $tool, $args, %o);
}

# run_task(%args) -> structuredContent (dies without a runId)
sub run_task {
    my ($self, %args) = @_;
    my $res = $self->call('opencode_run_task', \%args);
    my $sc = SMCP::Test::sc($res);
    die 'opencode_run_task failed: ' . json_encode($res) . "\n"
        unless $sc && $sc->{runId};
    $self->{sessions}{ $sc->{sessionId} } = 1 if $sc->{sessionId};
    return $sc;
}

# result($runId, $waitSeconds) -> structuredContent
sub result {
    my ($self, $run, $wait) = @_;
    my $res = $self->call('opencode_get_result',
        { runId => $run, (defined $wait ? (waitSeconds => $wait) : ()) },
        timeout => ($wait // 0) + 20);
    return SMCP::Test::sc($res) // { status => '(no result: ' . json_encode($res) . ')' };
}

sub terminal { return ($_[0] // '') =~ /^(completed|failed|cancelled)$/ ? 1 : 0 }

# wait_done($runId, $timeout) -> the last structuredContent (terminal, or
# whatever it was when the time ran out)
sub wait_done {
    my ($self, $run, $timeout) = @_;
    my $deadline = time() + ($timeout // 120);
    my $r;
    while (1) {
        my $left = int($deadline - time());
        $r = $self->result($run, $left > 30 ? 30 : ($left > 0 ? $left : 0));
        return $r if terminal($r->{status});
        return $r if time() >= $deadline;
        sleep(0.2) if ($r->{status} // '') =~ /^\(no result/;
    }
}

# run_completed($what, $runner, %args) -> (run_task's answer, the last
# result): the run queued with %args, waited for, checked `completed`
# (else diag_run with the runner's log)
sub run_completed {
    my ($self, $what, $runner, %args) = @_;
    my $run = $self->run_task(%args);
    my $res = $self->wait_done($run->{runId}, 300);
    Test::More::is($res->{status}, 'completed', "$what: completed")
        or $self->diag_run($run->{runId}, $runner);
    return ($run, $res);
}

# events($runId) -> every event, through opencode_get_events pages
sub events {
    my ($self, $run) = @_;
    my (@ev, $after);
    for (1 .. 100) {
        my $sc = SMCP::Test::sc($self->call('opencode_get_events',
            { runId => $run, limit => 1000, (defined $after ? (after => $after) : ()) }))
            or last;
        push @ev, @{ $sc->{events} || [] };
        last if !@{ $sc->{events} || [] } || @{ $sc->{events} } < 1000;
        $after = $sc->{nextAfter};
    }
    return @ev;
}

# the run's event stream as stored: ({id, type, data, ts, dts, json}, ...)
sub stored_events { return $_[0]{t}->run_events($_[1]) }

# the output of the run's tool calls, as stored, one after the other
# (a bash step's: what its command printed)
sub tool_output {
    my ($self, $run) = @_;
    return join "\n", map { $_->{json}{part}{state}{output} // '' }
        grep { ($_->{json}{type} // '') eq 'tool_use' } $self->stored_events($run);
}

sub run_hash { return $_[0]{t}->run_hash($_[1]) }

# the sandboxes of a run (any state): container ids; with the swarm
# backend its services' (their task containers go after them, in the
# background)
sub run_containers {
    my ($self, $run) = @_;
    my (undef, $out) = backend() eq 'swarm'
        ? docker('service', 'ls', '-q', '--filter', "label=smcp.run=$run")
        : docker('ps', '-aq', '--filter', "label=smcp.run=$run");
    return split ' ', $out;
}

# the running sandboxes of a run: container ids (docker ps without -a);
# with the swarm backend its services (as run_containers)
sub run_containers_running {
    my ($self, $run) = @_;
    return $self->run_containers($run) if backend() eq 'swarm';
    my (undef, $out) = docker('ps', '-q', '--filter', "label=smcp.run=$run");
    return split ' ', $out;
}

# what the run hash's container_id looks like with this backend
sub sandbox_id_re {
    return backend() eq 'swarm' ? qr/^[a-z0-9]{25}$/ : qr/^[0-9a-f]{64}$/;
}

##############################################################################
# diagnostics and timings

# diag_run($runId, @runners): the run hash (but the task), its stored
# events (kind of each JSON one, the data or its size for the others) and
# the last lines of each runner's log, as diag
sub diag_run {
    my ($self, $run, @runners) = @_;
    my $h = $self->run_hash($run);
    Test::More::diag("run $run: " . json_encode({ map { ($_ => $h->{$_}) }
                                                  grep { $_ ne 'task' } keys %$h }));
    Test::More::diag('events: ' . join(' ', map {
        my $d = $_->{data} // '';
        "$_->{type}:" . (ref $_->{json} ? join('', kinds($_->{json}))
                         : length($d) > 100 ? length($d) . 'B' : $d)
    } $self->stored_events($run)));
    my $n = @runners > 1 ? 20 : 40;
    Test::More::diag("runner $_->{name} log:\n" . $self->runner_log_tail($_, $n)) for @runners;
}

# show_events($runId): describe_events() of its stored events
sub show_events {
    my ($self, $run) = @_;
    return describe_events($self->stored_events($run));
}

# timing($what, $seconds): a figure for the record, printed (diag) by
# done() with the whole file's time (nothing when none was recorded)
sub timing {
    my ($self, $what, $secs) = @_;
    push @{ $self->{timings} }, [$what, $secs];
}

sub _print_timings {
    my ($self) = @_;
    return unless $self->{timings};
    my @t = (@{ $self->{timings} }, ['total', time() - $self->{t0}]);
    my ($w) = sort { $b <=> $a } map { length $_->[0] } @t;
    Test::More::diag(sprintf("timing %-${w}s %.2f s", @$_)) for @t;
}

##############################################################################
# script steps: bash commands, four-step scripts and their exact events

# bash_step($cmd, $what): a model turn that has OpenCode run $cmd with
# its bash tool
sub bash_step {
    my ($cmd, $what) = @_;
    return { tool_use => { name => 'bash', input => {
        command => $cmd, description => $what // 'Run a command' } } };
}

# gate_step($mark): a model turn whose bash command prints tick-1,
# tick-2, ... into the container's log (a line every 0.3 s) until the file
# /tmp/<mark> exists in the sandbox (SMCP::Docker::open_gate), then says
# "gate <mark> open": a run that runs until the test lets it go, and whose
# log shows any line lost or stored twice meanwhile.  $mark: [a-z0-9-]
sub gate_step {
    my ($mark) = @_;
    die "gate_step: $mark" unless $mark =~ /^[a-z0-9-]+$/;
    return { tool_use => { name => 'bash', input => {
        command => "i=0; until [ -e /tmp/$mark ]; do i=\$((i+1)); "
                 . "echo tick-\$i > /proc/1/fd/1; sleep 0.3; done; echo gate $mark open",
        description => "Wait for $mark", timeout => 600000 } } };
}

# what OpenCode prints for [gate_step, {text}]: the agent lines
our @GATE_AGENT = ('step_start', 'tool_use:bash', 'step_finish',
                   'step_start', 'text', 'step_finish');

# four_steps($mark, $delay2, $delay4): write <mark>-1.txt, write
# <mark>-2.txt ($delay2 s before the model answers), bash `cat` both,
# answer "Done with <mark>." ($delay4 s late); files in lower case
sub four_steps {
    my ($mark, $delay2, $delay4) = @_;
    my $f = lc $mark;
    return [
        { tool_use => { name => 'write', input => {
            filePath => "/workspace/repo/$f-1.txt", content => "one\n" } } },
        { tool_use => { name => 'write', input => {
            filePath => "/workspace/repo/$f-2.txt", content => "two\n" } },
          ($delay2 ? (hang => $delay2) : ()) },
        { tool_use => { name => 'bash', input => {
            command => "cat $f-1.txt $f-2.txt", description => 'Show both files' } } },
        { text => "Done with $mark.", ($delay4 ? (hang => $delay4) : ()) },
    ];
}

# what OpenCode prints for a four-step script, in order (the agent lines),
# and the lifecycle events of such a run without a repository
our @FOUR_STEPS_AGENT = ('step_start', 'tool_use:write', 'step_finish',
                         'step_start', 'tool_use:write', 'step_finish',
                         'step_start', 'tool_use:bash', 'step_finish',
                         'step_start', 'text', 'step_finish');
our @FOUR_STEPS_LIFECYCLE = ('status:started', 'status:running', 'smcp:agent_start',
                             'smcp:agent_exit', 'smcp:diff', 'status:completed');

# the events that came from the container's log (they carry its timestamp)
sub container_events {
    my ($self, $run) = @_;
    return grep { defined $_->{dts} } $self->stored_events($run);
}

# check_events_exact($runId, $what, %o): the stored events of a finished
# four-step run are exactly what the script implies (none lost, none
# twice), in log order, and the outcome counts each step_finish once
# (SMCP::Events::check_events_exact; %o: agent, lifecycle, ticks)
sub check_events_exact {
    my ($self, $id, $what, %o) = @_;
    SMCP::Events::check_events_exact([$self->stored_events($id)], $self->run_hash($id), $what,
        agent => $o{agent} || \@FOUR_STEPS_AGENT,
        lifecycle => $o{lifecycle} || \@FOUR_STEPS_LIFECYCLE,
        ticks => $o{ticks});
}

##############################################################################
# cleanup

sub _remove_runner_leftovers {
    my ($self, $name) = @_;
    my (undef, $svc) = docker('service', 'ls', '-q', '--filter', "label=smcp.runner=$name");
    docker({ timeout => 120 }, 'service', 'rm', split ' ', $svc) if $svc =~ /\S/;
    my (undef, $out) = docker('ps', '-aq', '--filter', "label=smcp.runner=$name");
    my @c = split ' ', $out;
    docker({ timeout => 120 }, 'rm', '-f', '-v', @c) if @c;
}

# the volumes of this stack's pooled sandboxes still there (smcp-pool-*)
sub _pool_volumes {
    my ($self) = @_;
    my @v;
    for my $name (sort keys %{ $self->{names} }) {
        my (undef, $ids) = docker('ps', '-aq', '--filter', "label=smcp.pool=$name");
        next unless $ids =~ /\S/;
        my (undef, $out) = docker('inspect', '--format',
            '{{range .Mounts}}{{.Name}} {{end}}', split ' ', $ids);
        push @v, grep { /^smcp-pool-[0-9a-f]+$/ } split ' ', $out;
    }
    return @v;
}

# the volumes labelled smcp.pool=<a runner of this stack> still there
# once the rest went: one that neither a container nor a session led to
# (@known) would have leaked, and is said, with its runner
sub _remove_pool_volumes {
    my ($self, @known) = @_;
    my %known = map { ($_ => 1) } @known;
    for my $name (sort keys %{ $self->{names} }) {
        my (undef, $out) = docker('volume', 'ls', '-q', '--filter', "label=smcp.pool=$name");
        for my $v (split ' ', $out) {
            Test::More::diag("pool volume $v of runner $name: no container nor "
                             . 'session led to it (it would have leaked)') unless $known{$v};
            docker({ timeout => 60 }, 'volume', 'rm', '-f', $v);
        }
    }
}

sub _sweep_stale_runner_containers {
    my ($self) = @_;
    my (undef, $out) = docker('ps', '-a', '--filter', 'label=smcp.runner',
                              '--format', '{{.ID}} {{.Label "smcp.runner"}}');
    my @c;
    for my $l (split /\n/, $out) {
        my ($id, $name) = split ' ', $l;
        next unless defined $name && $name =~ /^rt-.*-(\d+)-[0-9a-f]{4}$/;
        next if $1 == $$ || kill(0, $1);
        push @c, $id;
    }
    docker({ timeout => 120 }, 'rm', '-f', '-v', @c) if @c;
}

# the volume names of this file's sessions: the ones it queued, and every
# session this file's Redis knows (runs queued through call(), the
# dashboard or MCP tasks): their volumes are this file's too
sub _session_volumes {
    my ($self) = @_;
    for my $k (eval { $self->{t}->redis_keys('smcp:session:ses_*') }) {
        $self->{sessions}{$1} = 1 if $k =~ /^smcp:session:(ses_[0-9a-f]{24})$/;
    }
    my @v;
    for my $ses (sort keys %{ $self->{sessions} }) {
        my $h = eval { $self->{t}->redis_hgetall("smcp:session:$ses") } || {};
        push @v, "smcp-$ses", ($h->{volume} // ());
    }
    my %seen;
    return grep { !$seen{$_}++ } @v;
}

# left_on_host() -> { what => bytes }: what this file's runs left on the
# host's disk, measured where it is (not the engine's free space, which
# also takes whatever else the engine writes): each session volume's
# files, and each container of its runners still there (writable layer
# and log file)
sub left_on_host {
    my ($self) = @_;
    my %left;
    for my $v ($self->_session_volumes) {
        my ($rc, $mp) = docker('volume', 'inspect', '--format', '{{.Mountpoint}}', $v);
        chomp $mp;
        next if $rc != 0 || !-d $mp;
        my ($bytes) = `du -sb '$mp' 2>/dev/null` =~ /^(\d+)/;
        $left{"volume $v"} = $bytes // 0;
    }
    for my $name (sort keys %{ $self->{names} }) {
        my (undef, $ids) = docker('ps', '-aq', '--filter', "label=smcp.runner=$name");
        for my $id (split ' ', $ids) {
            my (undef, $out) = docker('inspect', '--size', '--format',
                                      '{{.SizeRw}} {{.LogPath}}', $id);
            my ($rw, $log) = split ' ', $out // '';
            $left{"container $id"} = ($rw // 0) + (($log && -s $log) || 0);
        }
    }
    return \%left;
}

sub cleanup {
    my ($self) = @_;
    return if $self->{cleaned}++ || $self->{owner} != $$;
    $self->stop_runner($_, 'TERM') for values %{ $self->{runners} };
    for my $n (keys %{ $self->{events_pids} }) {
        my ($pid, undef, $guard) = @{ $self->{events_pids}{$n} };
        kill 'TERM', $pid;
        _wait_guard($guard, 5) or do { kill 'KILL', $pid; _wait_guard($guard, 5) };
    }
    return if $ENV{SMCP_TEST_KEEP};
    # a pooled sandbox's volume (--pool): its own name, named by its
    # session's hash once a run took it
    my @pooled = $self->_pool_volumes;
    $self->_remove_runner_leftovers($_) for sort keys %{ $self->{names} };
    my @sessions = $self->_session_volumes;
    for my $v (@sessions) {
        my (undef, $ids) = docker('ps', '-aq', '--filter', "volume=$v");
        docker('rm', '-f', '-v', split ' ', $ids) if $ids =~ /\S/;
        docker({ timeout => 60 }, 'volume', 'rm', '-f', $v);
    }
    docker({ timeout => 60 }, 'volume', 'rm', '-f', @pooled) if @pooled;
    $self->_remove_pool_volumes(@pooled, @sessions);
    $self->_swarm_down if $self->{relay};
    $_->stop for grep { $_ } @{$self}{qw(anthropic github)};
}

# swarm: the session networks (their tasks' endpoints linger a little
# after their services went), then the relay
sub _swarm_down {
    my ($self) = @_;
    for my $ses (sort keys %{ $self->{sessions} }) {
        my $n = "smcp-net-$ses";
        docker('network', 'disconnect', '-f', $n, $self->{relay});
        wait_until(30, sub { (docker('network', 'rm', $n))[2] !~ /active endpoints/ });
    }
    SMCP::Docker::remove_container($self->{relay});
}

# done(): the timings printed, everything stopped and removed, nginx logs
# checked, done_testing
sub done {
    my ($self) = @_;
    $self->_print_timings;
    $self->cleanup;
    $self->{t}->done;
}

# before SMCP::Test's and SMCP::Docker's END blocks (those modules were
# compiled first, so their END blocks run after this one)
END {
    local $?;
    $_->cleanup for @STACKS;
}

1;
