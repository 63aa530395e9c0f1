#!/usr/bin/env perl
# A pooled sandbox's OpenCode started ahead (issue 13, point 3;
# entrypoint.sh, runner/sandbox/key-relay, runner/sandbox/session-events):
# everything real but the model (redis, nginx with the module and the
# egress, the sandbox image, dockerd, the real OpenCode; the fake
# Anthropic).
#
#   1. an idle pooled sandbox: its OpenCode server warmed, on 127.0.0.1
#      only; its relay answers 401 itself (no token yet), 431 to a huge
#      header block, 400 to garbage, and has sent nothing out
#   2. a run takes it and runs on the warm server (agent_start "warm"):
#      the model's requests carry the run's token (the egress accepted
#      them and sent the real key), every step's lines reach the runner
#      (the final text is the result), the package-registry variables
#      and the run's own reach the bash tool; a second request on the
#      relay's connection gets no answer (one request per connection)
#   3. a follow-up of that session (its own container, OpenCode cold)
#      continues the conversation
#   4. a run of a provider the server did not warm (azure) starts
#      OpenCode cold in the pooled sandbox
#   5. a warm run cancelled mid-way (opencode_cancel_run) ends promptly,
#      its container gone
#   6. runs of repositories on the warm server (whose instance of
#      /workspace/repo the warm-up made before the clone): the model is
#      told of the repository and reads its AGENTS.md; a repository's own
#      OpenCode configuration (opencode.json: instructions) is read too
#
# Needs root, Docker, `make` (module, runner) and redis-server; the sandbox
# image ($SMCP_SANDBOX_IMAGE) is built on first use.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time);

use SMCP::Docker qw(docker);
use SMCP::Events qw(agent_data kinds);
use SMCP::Stack;
use SMCP::Test qw(json_encode wait_until);

my $POOL = 1;
my $PH = 'smcp-pool-placeholder-not-a-token';

# the relay, from inside the sandbox: two requests on one connection
# (the second would ride unswapped if the relay allowed it); prints
# RESPONSES=<status lines counted>
my $two = q{perl -MIO::Socket::INET -e '
my $s = IO::Socket::INET->new("127.0.0.1:4097") or die "connect: $!";
my $r = "GET /anthropic/v1/models HTTP/1.1\r\nHost: x\r\nx-api-key: PH\r\n\r\n";
print $s $r . $r; local $/; my $a = <$s> // "";
my $n = () = $a =~ m{^HTTP/1\.[01] \d{3}}mg; print "RESPONSES=$n\n"'};
$two =~ s/PH/$PH/;

my %SCRIPTS = (
    'SCENARIO-WARM' => [
        { tool_use => { name => 'bash', input => {
            command => 'echo "PIP=${PIP_INDEX_URL:+set} GO=${GOPROXY:+set} '
                       . 'NPMRC=$(test -s ~/.npmrc && echo yes) RUN=$SMCP_RUN_ID"; pwd',
            description => 'Look at the environment' } } },
        { tool_use => { name => 'bash', input => {
            command => $two, description => 'Two requests on one connection' } } },
        { text => 'Warm done.' },
    ],
    'SCENARIO-AGAIN' => [
        { text => 'Again done.' },
    ],
    'SCENARIO-REPO' => [
        { text => 'Repo done.' },
    ],
    'SCENARIO-HANG' => [
        { tool_use => { name => 'bash', input => {
            command => 'echo STARTED', description => 'Start' } } },
        { hang => 120 },
    ],
);

# an Azure route (to nothing: the run only has to start cold), else
# opencode_run_task refuses the azure model at once (t/egress_announce.t)
my %REPOS = (
    'acme/plain' => { 'README.md' => "# plain\n",
                      'AGENTS.md' => "Mark AGENTS-PLAIN-7f3a.\n" },
    'acme/own'   => { 'README.md' => "# own\n",
                      'AGENTS.md' => "Mark AGENTS-OWN-c21e.\n",
                      'opencode.json' => '{"instructions":["EXTRA.md"]}' . "\n",
                      'EXTRA.md' => "Mark EXTRA-OWN-9d04.\n" },
);
my $s = SMCP::Stack->new(scripts => \%SCRIPTS, repos => \%REPOS,
    egress_env => { AZURE_OPENAI_API_KEY => 'azure-warm-test',
                    AZURE_OPENAI_BASE_URL => 'http://127.0.0.1:9' });
my $t = $s->t;
my $r = $s->start_runner(concurrency => 2, args => ['--pool', $POOL]);

sub idle_ids {
    my (undef, $out) = docker('ps', '--no-trunc', '--filter', "label=smcp.pool=$r->{name}",
                              '--format', '{{.ID}} {{.Names}}');
    return map { (split ' ')[0] } grep { / smcp-pool-/ } split /\n/, $out;
}

sub sh {
    my ($id, $cmd) = @_;
    my (undef, $out) = docker('exec', $id, 'bash', '-c', $cmd);
    return $out // '';
}

# the pool full and every idle sandbox's server warmed
sub warm_full {
    return wait_until(300, sub {
        my @id = idle_ids();
        @id == $POOL && !grep { sh($_, 'test -e /tmp/smcp-warm/ready && echo y') !~ /y/ } @id;
    }, 0.5);
}

sub lifecycle_step {
    my ($run, $step) = @_;
    my ($e) = grep { ref $_->{json} && ($_->{json}{type} // '') eq 'smcp'
                     && ($_->{json}{step} // '') eq $step } $s->stored_events($run);
    return $e && $e->{json};
}

sub tool_outputs {
    my ($run) = @_;
    return map { $_->{part}{state}{output} // '' }
        grep { ($_->{type} // '') eq 'tool_use' } agent_data($s->events($run));
}

##############################################################################

subtest 'an idle pooled sandbox: warmed, its relay closed' => sub {
    ok(warm_full(), 'the pool full, its server warmed') or diag($s->runner_log_tail($r, 20));
    my ($id) = idle_ids();
    like(sh($id, 'curl -s -m 5 http://127.0.0.1:4096/global/health'), qr/"healthy":true/,
         'the server answers on 127.0.0.1:4096');
    like(sh($id, 'cat /proc/net/tcp | awk \'$4 == "0A" { print $2 }\''),
         qr/\A(?:[0-9A-F]{6}7F:[0-9A-F]{4}\n)+\z/,
         'every listener on loopback only (the server, the relay, Docker\'s DNS)');
    like(sh($id, "curl -s -m 5 -o /dev/null -w '%{http_code}' -H 'x-api-key: $PH' "
                 . 'http://127.0.0.1:4097/anthropic/v1/messages -d {}'),
         qr/^401$/, 'no token yet: the relay answers 401 itself');
    like(sh($id, q{curl -s -m 10 -o /dev/null -w '%{http_code}' -H "x-big: $(head -c 70000 /dev/zero | tr '\0' a)" }
                 . 'http://127.0.0.1:4097/anthropic/v1/messages'),
         qr/^431$/, 'a header block over 64 KiB: 431');
    like(sh($id, q{printf 'NONSENSE\r\n\r\n' > /dev/tcp/127.0.0.1/4097; }
                 . q{exec 3<>/dev/tcp/127.0.0.1/4097; printf 'BAD LINE\r\n\r\n' >&3; head -n 1 <&3}),
         qr{^HTTP/1\.1 400}, 'garbage: 400');
    is(scalar(grep { ($_->{path} // '') =~ m{/messages} } $s->anthropic->requests), 0,
       'nothing reached the model');
};

my ($run_a, $res_a);

subtest 'a run on the warm server' => sub {
    my @before = idle_ids();
    $run_a = $s->run_task(task => 'SCENARIO-WARM: look around', title => 'W');
    $res_a = $s->wait_done($run_a->{runId}, 300);
    is($res_a->{status}, 'completed', 'completed') or $s->diag_run($run_a->{runId}, $r);
    my $h = $s->run_hash($run_a->{runId});
    is($h->{container_id}, $before[0], 'in the pooled sandbox');
    my $start = lifecycle_step($run_a->{runId}, 'agent_start');
    ok($start && $start->{warm}, 'agent_start says warm') or diag(json_encode($start));
    is($res_a->{result}, 'Warm done.', "the last step's text is the result (every line came)");
    my @req = grep { ($_->{body} // '') =~ /SCENARIO-WARM/ } $s->anthropic->requests;
    is(scalar(@req), 3, 'three model requests (no title request: the session has its title)');
    is(join(' ', kinds(agent_data($s->events($run_a->{runId})))),
       join(' ', ('step_start tool_use:bash step_finish') x 2, 'step_start text step_finish'),
       "the run's lines, as `opencode run --format json` prints them");
    is(scalar(grep { ($_->{headers}{'x-api-key'} // '') ne $s->anthropic->{key} } @req), 0,
       'each with the real key: the egress took the run token from the relay');
    # the run's directory is first seen by the server after the entry
    # script made it a repository: OpenCode tells the model so, as a cold
    # run does (warmed there before, it would keep "no")
    my ($env) = ($req[0]{body} // '') =~ m{(<env>.*?</env>)}s;
    ok(($env // '') =~ /Is directory a git repo: yes/,
       "the model is told the run's directory is a git repository")
        or diag($env // 'no <env> block');
    ok(($req[0]{body} // '') !~ /smcp-warm/, '... and nothing of the warm-up directory');
    my @out = tool_outputs($run_a->{runId});
    like($out[0] // '', qr/PIP=set GO=set NPMRC=yes RUN=\Q$run_a->{runId}\E/,
         "the bash tool has the registries' and the run's environment") or diag($out[0]);
    like($out[0] // '', qr{^/workspace/repo$}m, '... and works in /workspace/repo');
    like($out[1] // '', qr/^RESPONSES=1$/m, 'two requests on one relay connection: one answer')
        or diag($out[1]);
};

subtest 'a follow-up continues the session' => sub {
    my $n0 = () = $s->anthropic->requests;
    my ($run, $res) = $s->run_completed('follow-up', $r, task => 'SCENARIO-AGAIN: more',
                                        sessionId => $run_a->{sessionId});
    my $h = $s->run_hash($run->{runId});
    isnt($h->{container_id}, $s->run_hash($run_a->{runId})->{container_id}, 'its own container');
    my @req = grep { ($_->{body} // '') =~ /SCENARIO-AGAIN/ } $s->anthropic->requests;
    ok(@req, 'the model was asked');
    like($req[0]{body} // '', qr/SCENARIO-WARM.*Warm done\./s,
         "with the first run's conversation");
    is($res->{result}, 'Again done.', 'result');
};

subtest 'a provider the server did not warm: OpenCode cold, in the pooled sandbox' => sub {
    ok(warm_full(), 'the pool warm again');
    my @before = idle_ids();
    my $run = $s->run_task(task => 'SCENARIO-AGAIN: azure', title => 'Z',
                           model => 'azure/some-deployment');
    my $res = $s->wait_done($run->{runId}, 300);
    ok(SMCP::Stack::terminal($res->{status}), "ended ($res->{status})");
    is($s->run_hash($run->{runId})->{container_id}, $before[0], 'in the pooled sandbox');
    my $start = lifecycle_step($run->{runId}, 'agent_start');
    ok($start && !$start->{warm}, 'agent_start, not warm: the cold start')
        or diag(json_encode($start));
};

subtest "repositories on the warm server: AGENTS.md, their own configuration" => sub {
    for my $c (['plain', 'AGENTS-PLAIN-7f3a', undef],
               ['own', 'AGENTS-OWN-c21e', 'EXTRA-OWN-9d04']) {
        my ($name, $agents, $extra) = @$c;
        ok(warm_full(), "$name: the pool warm again");
        my $mark = "SCENARIO-REPO: $name " . int(rand(1e9));
        my $run = $s->run_task(task => $mark, title => "R $name",
                               repository => "https://github.com/acme/$name");
        my $res = $s->wait_done($run->{runId}, 300);
        is($res->{status}, 'completed', "$name: completed")
            or $s->diag_run($run->{runId}, $r);
        ok((lifecycle_step($run->{runId}, 'agent_start') || {})->{warm},
           "$name: on the warm server");
        my ($req) = grep { ($_->{body} // '') =~ /\Q$mark\E/ } $s->anthropic->requests;
        my $body = $req ? $req->{body} : '';
        # (the bodies are long: checked without printing them)
        ok($body =~ /Is directory a git repo: yes/, "$name: told it is a git repository");
        ok(index($body, $agents) >= 0, "$name: the repository's AGENTS.md reached the model");
        if ($extra) {
            ok(index($body, $extra) >= 0,
               "$name: its opencode.json was read (its instructions reached the model)");
        } else {
            ok($body ne '' && index($body, 'EXTRA-OWN') < 0,
               "$name: nothing of another repository's");
        }
    }
};

subtest 'a warm run cancelled' => sub {
    ok(warm_full(), 'the pool warm again');
    my $run = $s->run_task(task => 'SCENARIO-HANG: wait', title => 'C');
    ok(wait_until(180, sub { grep { /STARTED/ } tool_outputs($run->{runId}) }, 0.3),
       'mid-run') or $s->diag_run($run->{runId}, $r);
    ok(lifecycle_step($run->{runId}, 'agent_start')->{warm}, '... on the warm server');
    my $tc = time();
    $s->call('opencode_cancel_run', { runId => $run->{runId} });
    my $res = $s->wait_done($run->{runId}, 300);
    my $dt = time() - $tc;
    is($res->{status}, 'cancelled', sprintf('cancelled (%.2f s)', $dt));
    # by the cancel, well before the model's 120 s hang would end the run
    cmp_ok($dt, '<', 60, 'promptly');
    is(scalar($s->run_containers($run->{runId})), 0, 'its container gone');
};

$s->done;
