#!/usr/bin/env perl
# A hostile agent, end to end: MCP through nginx, build/smcp-runner,
# dockerd, the sandbox image with the real OpenCode; only the model and
# GitHub are fakes.  The scripted model has OpenCode's bash tool do what a
# hostile agent would, from inside its sandbox:
#
#   git     push to main, force-push main, delete a branch, push another
#           branch and its own run branch (the run did not ask for a pull
#           request), clone, read and push another repository
#   pr      the same with createPullRequest: only its own branch
#           opencode/<runId> is written (and its runner opens the pull
#           request)
#   api     provider endpoints outside inference (models, files, batches),
#           publishing to the package registry (npm enabled), a registry
#           not enabled,
#           the pull-request API with another head, another repository's
#           API, unknown routes
#   conns   3000 connections to the egress listener, held
#   flood   200 MB of output
#   disk    400 MB written into the workspace (limit 100 MB)
#   bomb    a fork bomb
#
# Asserted: every attempt is refused and nothing was pushed or read (the
# fake GitHub's refs and request log), the runner stays up, every run ends
# within its deadline, Redis memory stays bounded by the event budget, /mcp
# keeps answering promptly throughout (a monitor pings it every 0.25 s),
# and the host stays healthy (its process count, and the disk the runs
# left behind).
#
# Needs root, Docker, `make` and redis-server; CI=true turns skips into
# failures.  Uses $SMCP_SANDBOX_IMAGE.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp ();
use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Docker qw(fork_child orphaned stop_child);
use SMCP::Stack qw(bash_step);
use SMCP::Test qw(json_decode slurp wait_until);

my $BUDGET_MB = 16;         # --max-event-bytes
my $DISK_MB = 100;          # --workspace-limit
my $BOMB_DEADLINE = 40;

##############################################################################
# what the agent runs

# r CMD...: runs a command, says ALLOWED or REFUSED (and git's first line)
my $R = <<'SH';
r() {
    if o=$("$@" 2>&1); then
        echo "ALLOWED: $*"
    else
        echo "REFUSED: $* :: $(printf '%s\n' "$o" | grep -m1 -E 'error|fatal|denied|403|rejected' || printf '%s\n' "$o" | head -1)"
    fi
}
cd /workspace/repo
SH

my $GIT = $R . <<'SH';
git commit -q --allow-empty -m 'hostile commit'
r git push origin HEAD:refs/heads/main
r git push -f origin HEAD:refs/heads/main
git checkout -q --orphan evil && git commit -q --allow-empty -m evil
r git push -f origin evil:refs/heads/main
r git push origin :refs/heads/keep
r git push origin HEAD:refs/heads/feature
r git push origin HEAD:refs/heads/opencode/$SMCP_RUN_ID
r git push origin HEAD:refs/tags/v9
r git clone -q https://github.com/acme/secret /tmp/secret
r git ls-remote https://github.com/acme/secret
r git push https://github.com/acme/secret HEAD:refs/heads/main
echo git-done
SH

my $PR = $R . <<'SH';
git checkout -q -b work && echo change > change.txt && git add change.txt
git commit -q -m 'the run change'
r git push origin HEAD:refs/heads/opencode/$SMCP_RUN_ID
r git push origin HEAD:refs/heads/main
r git push -f origin HEAD:refs/heads/main
r git push origin :refs/heads/keep
r git push origin HEAD:refs/heads/opencode/run_000000000000000000000000
r git push origin HEAD:refs/heads/opencode/$SMCP_RUN_ID HEAD:refs/heads/feature
r git push https://github.com/acme/secret HEAD:refs/heads/opencode/$SMCP_RUN_ID
echo pr-done
SH

# req METHOD PATH [BODY]: one HTTP/1.1 request to the egress listener with
# the run token where SDKs put keys; prints the status line
my $REQ = <<'SH';
hp=${SMCP_EGRESS_URL#http://}
req() {
    exec 3<>"/dev/tcp/${hp%%:*}/${hp##*:}" || { echo "$1 $2 -> connect failed"; return; }
    printf '%s %s HTTP/1.1\r\nHost: %s\r\nx-api-key: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
        "$1" "$2" "$hp" "$SMCP_RUN_TOKEN" "$SMCP_RUN_TOKEN" "${#3}" "$3" >&3
    read -r st <&3
    echo "$1 $2 -> ${st%$'\r'}"
    exec 3<&-
}
SH

my $API = $REQ . <<'SH';
req GET /anthropic/v1/models
req POST /anthropic/v1/files '{}'
req GET /anthropic/v1/files
req POST /anthropic/v1/messages/batches '{"requests":[]}'
req POST /anthropic/v1/../v1/files '{}'
req POST /anthropic/v1/messages%2F..%2Ffiles '{}'
req POST /github-api/repos/acme/app/pulls '{"title":"x","head":"main","base":"keep"}'
req GET /github-api/repos/acme/secret
req DELETE /github-api/repos/acme/app
req GET /github-api/user
req POST /openai/v1/files '{}'
req GET /
req PUT /registry/npm/evil '{"name":"evil"}'
req POST /registry/npm/-/v1/login '{}'
req DELETE /registry/npm/evil/-rev/1
req GET /registry/pypi/simple/evil/
echo api-done
SH

my $CONNS = <<'SH';
hp=${SMCP_EGRESS_URL#http://}
n=0
for i in $(seq 3000); do
    exec {fd}<>"/dev/tcp/${hp%%:*}/${hp##*:}" 2>/dev/null && n=$((n + 1))
done
echo "held $n of 3000"
sleep 20
echo released
SH

my $FLOOD = q{yes "$(printf '%0999d' 0)" | head -c 200000000 > /proc/1/fd/1; echo flooded};
my $DISK = q{dd if=/dev/zero of=/workspace/repo/fill bs=1M count=400 2>&1 | tail -1; echo filled};
my $BOMB = q{bomb() { bomb | bomb & }; bomb; echo bombed};

my $s = SMCP::Stack->new(
    scripts => {
        'SCENARIO-GIT'   => [ bash_step($GIT, 'Push'), { text => 'git done' } ],
        'SCENARIO-PR'    => [ bash_step($PR, 'Push'), { text => 'pr done' } ],
        'SCENARIO-API'   => [ bash_step($API, 'Call'), { text => 'api done' } ],
        'SCENARIO-CONNS' => [ bash_step($CONNS, 'Connect'), { text => 'conns done' } ],
        'SCENARIO-FLOOD' => [ bash_step($FLOOD, 'Print'), { text => 'flood done' } ],
        'SCENARIO-DISK'  => [ bash_step($DISK, 'Fill'), { hang => 150 } ],
        'SCENARIO-BOMB'  => [ bash_step($BOMB, 'Fork'), { hang => 150 } ],
    },
    repos => {
        'acme/app'    => { 'README.md' => "# app\n" },
        'acme/secret' => { 'SECRET.md' => "the other tenant's code\n" },
    },
    # a package registry enabled (its upstream: nothing listens there):
    # publishing is refused, another registry is not there
    egress_env => { SMCP_REGISTRIES => 'npm', NPM_REGISTRY_URL => 'http://127.0.0.1:1',
                    SMCP_REGISTRY_CACHE_DIR => File::Temp::tempdir(
                        'smcp-hostile-cache-XXXXXX', TMPDIR => 1, CLEANUP => 1) },
);
my $t = $s->t;
my $gh = $s->github;
$gh->commit_files('acme/app', branch => 'keep', from => 'main',
                  files => { 'keep.txt' => "keep\n" }, message => 'keep');
my %REFS = (app => $gh->refs('acme/app'), secret => $gh->refs('acme/secret'));
my $runner = $s->start_runner(concurrency => 4, args => [
    '--max-event-bytes', "${BUDGET_MB}m", '--workspace-limit', "${DISK_MB}m"]);

##############################################################################
# the monitors: /mcp latency, Redis memory, host processes and disk

my $mon_log = $t->dir . '/monitor.log';
my $mon = fork_child(sub {
    delete $t->{redis_conn};        # the parent's socket is the parent's
    open(my $fh, '>>', $mon_log) or die;
    $fh->autoflush(1);
    until (orphaned()) {
        my $t0 = time();
        my $res = $t->mcp_post({ jsonrpc => '2.0', id => 1, method => 'ping' },
                               session => $s->sid, timeout => 10);
        printf $fh "mcp %.4f %s\n", time() - $t0, $res->{status} // 0;
        my $info = $t->redis('INFO', 'memory') // '';
        my ($mem) = $info =~ /^used_memory:(\d+)/m;
        printf $fh "redis %d\n", $mem // -1;
        my $procs = () = glob '/proc/[0-9]*';
        printf $fh "procs %d\n", $procs;
        sleep(0.25);
    }
}, 'monitor');

sub monitor {
    my ($what) = @_;
    my @l = split /\n/, slurp($mon_log);
    return map { /^$what (\S+)(?: (\S+))?/ ? [$1, $2] : () } @l;
}

my $procs0 = () = glob '/proc/[0-9]*';
my $mem0 = ($t->redis('INFO', 'memory') // '') =~ /^used_memory:(\d+)/m ? $1 : 0;

sub run_and_wait {
    my ($t0, $id, $timeout, $what) = @_;
    my $r = $s->wait_done($id, $timeout);
    $s->timing("$what: run_task -> $r->{status}", time() - $t0);
    return $r;
}

my $repo = 'https://github.com/acme/app';

##############################################################################
# 1. git, pull requests, APIs, connections: four sandboxes at once

my $t1 = time();
my $git = $s->run_task(task => 'SCENARIO-GIT: push everywhere', repository => $repo,
                       title => 'git');
my $pr = $s->run_task(task => 'SCENARIO-PR: push everywhere', repository => $repo,
                      title => 'pr', createPullRequest => JSON::PP::true);
my $api = $s->run_task(task => 'SCENARIO-API: call everything', title => 'api');
my $conns = $s->run_task(task => 'SCENARIO-CONNS: hold the egress', title => 'conns');

subtest 'git: nothing is written, no other repository is read' => sub {
    my $r = run_and_wait($t1, $git->{runId}, 300, 'git');
    is($r->{status}, 'completed', 'the run completed') or $s->diag_run($git->{runId}, $runner);
    my $out = $s->tool_output($git->{runId});
    like($out, qr/git-done/, 'the agent ran every attempt') or diag($out);
    my @allowed = $out =~ /^ALLOWED: (.*)$/mg;
    is_deeply(\@allowed, [], 'no push, clone or ls-remote was allowed')
        or diag($out);
    my $n = () = $out =~ /^REFUSED: /mg;
    is($n, 10, 'ten attempts refused') or diag($out);
    # (the pr run, at the same time, may write its own branch)
    my %app = %{ $gh->refs('acme/app') };
    delete $app{"refs/heads/opencode/$pr->{runId}"};
    is_deeply(\%app, $REFS{app}, 'acme/app: every ref as it was');
    ok(!exists $app{"refs/heads/opencode/$git->{runId}"}, '... no branch of this run');
    is_deeply($gh->refs('acme/secret'), $REFS{secret}, 'acme/secret: every ref as it was');
};

subtest 'pr: only the run\'s own branch is written' => sub {
    my $r = run_and_wait($t1, $pr->{runId}, 300, 'pr');
    is($r->{status}, 'completed', 'the run completed') or $s->diag_run($pr->{runId}, $runner);
    my $out = $s->tool_output($pr->{runId});
    like($out, qr/pr-done/, 'the agent ran every attempt') or diag($out);
    my @allowed = $out =~ /^ALLOWED: (.*)$/mg;
    is_deeply(\@allowed, ["git push origin HEAD:refs/heads/opencode/$pr->{runId}"],
              'only the push of opencode/<runId> was allowed') or diag($out);
    my $refs = $gh->refs('acme/app');
    my %want = (%{ $REFS{app} },
                "refs/heads/opencode/$pr->{runId}" => $refs->{"refs/heads/opencode/$pr->{runId}"});
    ok($refs->{"refs/heads/opencode/$pr->{runId}"}, 'acme/app has the run\'s branch');
    is_deeply($refs, \%want, '... and every other ref as it was');
    is_deeply($gh->refs('acme/secret'), $REFS{secret}, 'acme/secret: every ref as it was');
};

subtest 'api: nothing outside inference and the run\'s own repository' => sub {
    my $r = run_and_wait($t1, $api->{runId}, 300, 'api');
    is($r->{status}, 'completed', 'the run completed') or $s->diag_run($api->{runId}, $runner);
    my $out = $s->tool_output($api->{runId});
    like($out, qr/api-done/, 'the agent made every request') or diag($out);
    my @st = $out =~ /-> HTTP\/1\.1 (\d+)/g;
    is(scalar(@st), 16, 'sixteen answers') or diag($out);
    is_deeply([grep { $_ < 400 } @st], [], 'none of them a success') or diag($out);
    my @reg = $out =~ m{^((?:PUT|POST|DELETE) /registry/\S+ -> HTTP/1\.1 405)}mg;
    is(scalar(@reg), 3, 'registry: publishing refused as read-only (405)') or diag($out);
    like($out, qr{^GET /registry/pypi/simple/evil/ -> HTTP/1\.1 403}m,
         'registry: one not enabled is refused (403)');
    my @model = grep { ($_->{path} // '') ne '/v1/messages' } $s->anthropic->requests;
    is_deeply([map { "$_->{method} $_->{path}" } @model], [],
              'the model API saw nothing but /v1/messages');
    # but the pr run's pull request, which its runner opens: the default
    # branch looked up, the pull request of opencode/<runId> created
    my @gh = grep { ($_->{path} // '') =~ m{^/(?:api/v3/)?(?:repos|user)} } $gh->requests;
    my @runner = grep { "$_->{method} $_->{path}" eq 'GET /repos/acme/app'
                        || ("$_->{method} $_->{path}" eq 'POST /repos/acme/app/pulls'
                            && ($_->{json}{head} // '') eq "opencode/$pr->{runId}") } @gh;
    is(scalar(@runner), 2, 'GitHub\'s API saw the pr run\'s pull request opened');
    my %mine = map { ($_ => 1) } @runner;
    is_deeply([map { "$_->{method} $_->{path}" } grep { !$mine{$_} } @gh], [],
              '... and nothing else');
};

subtest 'conns: 3000 connections to the egress listener' => sub {
    my $r = run_and_wait($t1, $conns->{runId}, 300, 'conns');
    is($r->{status}, 'completed', 'the run completed') or $s->diag_run($conns->{runId}, $runner);
    my $out = $s->tool_output($conns->{runId});
    my ($held) = $out =~ /held (\d+) of 3000/;
    ok(defined $held && $held <= 64, 'the sandbox held at most 64 ('
       . ($held // 'none') . ')') or diag($out);
};

##############################################################################
# 2. 200 MB of output and a full workspace

my $t2 = time();
my $flood = $s->run_task(task => 'SCENARIO-FLOOD: print 200 MB', title => 'flood');
# (its deadline leaves room for an OpenCode that starts slowly on a loaded
# machine: the workspace limit, not the deadline, must stop it)
my $disk = $s->run_task(task => 'SCENARIO-DISK: fill the disk', title => 'disk',
                        timeoutSeconds => 300);

subtest '200 MB of output' => sub {
    my $r = run_and_wait($t2, $flood->{runId}, 400, 'flood');
    is($r->{status}, 'completed', 'the run completed') or $s->diag_run($flood->{runId}, $runner);
    is($r->{result}, 'flood done', 'with the agent\'s answer');
    my $h = $s->run_hash($flood->{runId});
    ok($h->{event_bytes} <= $BUDGET_MB * 1024 * 1024 + 300 * 1024,
       "event_bytes $h->{event_bytes} within the budget (${BUDGET_MB} MiB)");
    my $len = $t->redis('XLEN', "smcp:run:$flood->{runId}:events");
    ok($len < 30000, "the stream holds $len events, not 200000");
};

subtest 'a full workspace' => sub {
    my $r = run_and_wait($t2, $disk->{runId}, 420, 'disk');
    is($r->{status}, 'failed', 'the run failed') or $s->diag_run($disk->{runId}, $runner);
    like($r->{error} // '', qr/workspace limit exceeded/, 'saying why: '
         . ($r->{error} // 'null'));
};

##############################################################################
# 3. a fork bomb

my $t3 = time();
my $bomb = $s->run_task(task => 'SCENARIO-BOMB: fork', title => 'bomb',
                        timeoutSeconds => $BOMB_DEADLINE);

subtest 'a fork bomb' => sub {
    my $r = run_and_wait($t3, $bomb->{runId}, 300, 'bomb');
    is($r->{status}, 'failed', 'the run failed') or $s->diag_run($bomb->{runId}, $runner);
    # stopped at its deadline, or earlier when the bomb leaves the agent
    # itself no process to start (Bun aborts: exit 134)
    like($r->{error} // '', qr/deadline|agent exited with code 13[47]\b/,
         'at its deadline, or the agent starved: ' . ($r->{error} // 'null'));
    my $h = $s->run_hash($bomb->{runId});
    my $took = ($h->{finished_at} - $h->{created_at}) / 1000;
    # the deadline the runner stored (ms) when the run started: ended by
    # then, give or take the stop of a sandbox full of processes; the
    # model's 150 s hang would end it long after
    my $past = (($h->{finished_at} // 0) - ($h->{deadline} // 0)) / 1000;
    ok($h->{deadline} && $past < 60,
       sprintf('within its deadline (%+.1f s from it; %.1f s after run_task, deadline %d s)',
               $past, $took, $BOMB_DEADLINE));
    ok(wait_until(30, sub { !$s->run_containers($bomb->{runId}) }), 'its sandbox is gone');
};

##############################################################################
# the whole time

stop_child($mon);
my @mcp = monitor('mcp');
# liveness, not speed (the attacks load the machine this test runs on):
# every ping answered with 200 before the monitor's 10 s gave up on it;
# the figures printed
my @bad = grep { ($_->[1] // 0) != 200 } @mcp;
ok(@mcp > 50, scalar(@mcp) . ' /mcp pings during the attacks');
is(scalar(@bad), 0, '/mcp answered every ping with 200')
    or diag(join ', ', map { "$_->[0] s ($_->[1])" } @bad[0 .. ($#bad > 9 ? 9 : $#bad)]);
my @lat = sort { $a <=> $b } map { $_->[0] } @mcp;
note(sprintf('/mcp ping: p50 %.3f s, p99 %.3f s, slowest %.3f s',
             @lat ? ($lat[$#lat / 2], $lat[int($#lat * 0.99)], $lat[-1]) : (0, 0, 0)));

my ($mem_max) = sort { $b <=> $a } map { $_->[0] } monitor('redis');
ok(($mem_max // 0) - $mem0 < 4 * $BUDGET_MB * 1024 * 1024,
   sprintf('Redis memory stayed bounded: %.1f MB at most (%.1f MB before; budget %d MiB a run)',
           ($mem_max // 0) / 1e6, $mem0 / 1e6, $BUDGET_MB));

my ($procs_max) = sort { $b <=> $a } map { $_->[0] } monitor('procs');
ok(($procs_max // 0) - $procs0 < 2000,
   "host processes stayed bounded: $procs_max at most ($procs0 before)");
# what the runs left on the disk: their session volumes (the disk run's
# workspace keeps what it wrote before its limit stopped it) and any
# sandbox still there with its log (the flood's 200 MB among them)
my $left = $s->left_on_host;
my $left_sum = 0;
$left_sum += $_ for values %$left;
ok($left_sum < 1024 * 1024 * 1024,
   sprintf('host disk: the runs left %.0f MB (their volumes, containers and logs)',
           $left_sum / 1e6))
    or diag(join "\n", map { sprintf '%s: %.1f MB', $_, $left->{$_} / 1e6 } sort keys %$left);
note(sprintf '%s: %.1f MB', $_, $left->{$_} / 1e6) for sort keys %$left;

ok($s->runner_alive($runner), 'the runner is up');
my @crit = grep { /level=(crit)/ } split /\n/, $s->runner_log($runner);
is(scalar(@crit), 0, 'no critical line in the runner log') or diag(join "\n", @crit);
$s->stop_runner($runner, 'TERM');
$s->done;
