#!/usr/bin/env perl
# The runner (build/smcp-runner) end to end, everything real but the model
# and GitHub: MCP calls through nginx with the module, the run queued in
# Redis, the runner starting a sandbox container from the sandbox image on
# a runner/sandbox-net network, the real OpenCode in it talking only to the
# egress proxy (nginx, the routes that ship), which adds the real keys on
# the way to a scripted fake Anthropic and a fake GitHub.
#
#   1. opencode_run_task on https://github.com/owner/repo: the model has
#      OpenCode write two files, run the repository's test script and
#      answer; get_result (long-poll) until `completed`: result, files
#      changed, diff, tokens, cost, timestamps; get_events: the tool calls
#      in order, and visible while the run was still `running`
#   2. concurrency 2: two sessions running at the same time; a second run
#      queued on the first session starts only after the first finished,
#      sees its files and continues its conversation
#
# Needs root, Docker, `make` (module, runner) and redis-server; the sandbox
# image is built on first use (runner/sandbox/build-image).  Under CI=true a
# missing prerequisite is a failure.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP;
use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Events qw(agent_data kinds step_totals);
use SMCP::Stack;
use SMCP::Test qw(json_encode wait_until iso_ms iso2epoch);

my $T0 = time();

##############################################################################
# the scripts of the fake model

my $reply_e2e = 'Wrote alpha.txt and beta.txt; run-tests.sh printed CHECK alpha beta.';
my $reply_a = 'Run A left a note.';
my $reply_b = 'Run B read the note of run A.';
my $reply_c = 'Run C (another session) is done.';
my $note = "NOTE-7f3a from run A\n";

my %SCRIPTS = (
    'SCENARIO-E2E' => [
        { tool_use => { name => 'write', input => {
            filePath => '/workspace/repo/alpha.txt', content => "alpha\n" } } },
        { tool_use => { name => 'write', input => {
            filePath => '/workspace/repo/beta.txt', content => "beta\n" } } },
        { tool_use => { name => 'bash', input => {
            command => 'sh run-tests.sh', description => 'Run the tests' } } },
        # the answer takes a while: the tool calls are stored well before
        { text => $reply_e2e, hang => 3 },
    ],
    'SCENARIO-SESSA' => [
        { tool_use => { name => 'write', input => {
            filePath => '/workspace/repo/notes.txt', content => $note } } },
        { text => $reply_a, hang => 5 },
    ],
    'SCENARIO-SESSB' => [
        { tool_use => { name => 'bash', input => {
            command => 'cat notes.txt', description => 'Read the note' } } },
        { text => $reply_b },
    ],
    'SCENARIO-OTHER' => [
        { tool_use => { name => 'bash', input => {
            command => 'echo other session', description => 'Say something' } } },
        { text => $reply_c, hang => 5 },
    ],
);

my $s = SMCP::Stack->new(
    scripts => \%SCRIPTS,
    repos   => { 'owner/repo' => {
        'README.md'    => "# Demo\n",
        'run-tests.sh' => '#!/bin/sh' . "\n" . 'echo "CHECK $(cat alpha.txt) $(cat beta.txt)"' . "\n",
    } },
);
my $t = $s->t;
$s->timing('stack up (redis, nginx, fakes, network)', time() - $T0);

my $runner = $s->start_runner(concurrency => 2);
ok($s->runner_alive($runner), 'the runner is up');

##############################################################################
# 1. end to end

subtest 'end to end: clone, write, write, bash, answer' => sub {
    my $t0 = time();
    my $run = $s->run_task(task => 'SCENARIO-E2E: write alpha.txt and beta.txt, run run-tests.sh, report.',
                           repository => 'https://github.com/owner/repo', title => 'E2E');
    my $id = $run->{runId};
    is($run->{status}, 'started', 'run_task: started at once');

    # watch it live: tool calls readable while the run is `running`
    my ($live, $seen_running, %status_seen);
    my $last;
    wait_until(120, sub {
        my $r = $s->result($id);
        $status_seen{ $r->{status} }++;
        $seen_running ||= $r->{status} eq 'running';
        return 1 if SMCP::Stack::terminal($r->{status});
        my @tu = grep { ($_->{type} // '') eq 'tool_use' } agent_data($s->events($id));
        if (@tu && !$live) {
            # status read after the events: they were there before the end
            my $after = $s->result($id);
            $live = { tools => scalar(@tu), status => $after->{status}, t => time() - $t0 }
                if $after->{status} eq 'running';
        }
        return 0;
    }, 0.3);
    ok($seen_running, 'get_result showed `running` while the sandbox ran');
    ok($live, 'get_events showed tool calls while the run was still running')
        and note("live: $live->{tools} tool call(s) at " . sprintf('%.1f s', $live->{t}));

    my $res = $s->wait_done($id, 300);
    $s->timing('end-to-end run (run_task -> completed)', time() - $t0);
    is($res->{status}, 'completed', 'get_result (waitSeconds): completed')
        or $s->diag_run($id, $runner);
    is($res->{result}, $reply_e2e, 'result: the scripted reply');
    is($res->{error}, undef, 'no error') or diag($res->{error});
    is($res->{exitCode}, 0, 'exitCode 0');
    is_deeply([sort map { $_->{path} } @{ $res->{filesChanged} || [] }], ['alpha.txt', 'beta.txt'],
              'filesChanged: the two files') or diag(json_encode($res->{filesChanged}));
    my ($fa) = grep { $_->{path} eq 'alpha.txt' } @{ $res->{filesChanged} || [] };
    is($fa && $fa->{additions}, 1, 'filesChanged: alpha.txt +1');
    # the outcome counts the stored step_finish events, each once
    my ($in, $out, $cost) = step_totals(map { $_->{json} } $s->stored_events($id));
    ok($in > 0 && $out > 0, "the steps used tokens ($in in, $out out)");
    is($res->{tokens}{input}, $in, 'tokens.input: the sum over the stored step_finish events');
    is($res->{tokens}{output}, $out, 'tokens.output: likewise');
    ok(abs(($res->{cost} // 0) - $cost) < 1e-5 && $cost > 0,
       "cost: likewise ($res->{cost} vs $cost)");
    my $h = $s->run_hash($id);
    is(iso_ms($res->{createdAt}), $h->{created_at}, 'createdAt: created_at of the run hash');
    is(iso_ms($res->{startedAt}), $h->{started_at}, 'startedAt: started_at');
    is(iso_ms($res->{finishedAt}), $h->{finished_at}, 'finishedAt: finished_at');
    my ($st, $ft, $ct) = map { iso2epoch($res->{$_}) } qw(startedAt finishedAt createdAt);
    ok($st && $ft && $ct <= $st && $st <= $ft, 'createdAt <= startedAt <= finishedAt');
    is($res->{repository}, 'https://github.com/owner/repo', 'repository');

    # the diff
    my $d = SMCP::Test::sc($s->call('opencode_get_diff', { runId => $id }));
    my $diff = $d && $d->{diff} // '';
    is_deeply([$diff =~ m{^diff --git a/(\S+) }mg], ['alpha.txt', 'beta.txt'],
              'get_diff: both files (and nothing else)') or diag($diff);
    like($diff, qr/^\+alpha$/m, 'get_diff: +alpha');
    like($diff, qr/^\+beta$/m, 'get_diff: +beta');
    ok(!$d->{truncated}, 'get_diff: not truncated');

    # the events
    my @ev = $s->events($id);
    my @agent = agent_data(@ev);
    my @tu = grep { ($_->{type} // '') eq 'tool_use' } @agent;
    is_deeply([map { $_->{part}{tool} } @tu], ['write', 'write', 'bash'],
              'get_events: tool_use write, write, bash in order')
        or diag(join ' ', kinds(@agent));
    is_deeply([map { $_->{part}{state}{input}{filePath} } @tu[0, 1]],
              ['/workspace/repo/alpha.txt', '/workspace/repo/beta.txt'], 'the files written');
    like($tu[2]{part}{state}{output} // '', qr/^CHECK alpha beta$/m,
         'bash: the test script read both files');
    my @lc = map { $_->{data} } grep { ($_->{type} // '') eq 'lifecycle' } @ev;
    my @steps = map { $_->{step} // ($_->{status} ? "status:$_->{status}" : '?') } @lc;
    my @want = ('status:started', 'status:running', 'clone', 'agent_start', 'agent_exit', 'diff', 'status:completed');
    is_deeply([grep { $_ ne '?' } @steps], \@want,
              'lifecycle: started, running, clone, agent_start, agent_exit, diff, completed')
        or diag(json_encode(\@lc));
    my ($first_ev_t) = map { iso2epoch($_->{time}) } grep { ($_->{type} // '') eq 'agent' } @ev;
    my ($bash_ev) = grep { ($_->{type} // '') eq 'agent' && ($_->{data}{type} // '') eq 'tool_use'
                           && ($_->{data}{part}{tool} // '') eq 'bash' } @ev;
    my $bash_t = $bash_ev && iso2epoch($bash_ev->{time});
    ok($bash_t && $ft && $bash_t <= $ft - 2,
       sprintf('the bash tool_use was stored %.2f s before the run finished (the answer took 3 s)',
               ($ft // 0) - ($bash_t // 0)));
    like($h->{container_id} // '', $s->sandbox_id_re, 'run hash: container_id');
    is($h->{claimed_by} && ($h->{claimed_by} =~ m{^\Q$runner->{name}\E/} ? 1 : 0), 1,
       'run hash: claimed_by names the runner') or diag($h->{claimed_by});
    my @dts = grep { defined } map { $_->{dts} } $s->stored_events($id);
    ok(@dts >= @agent, 'every agent event carries its Docker timestamp (dts)');

    # the model's side
    my @req = grep { ($_->{body} // '') =~ /SCENARIO-E2E/ } $s->anthropic->requests;
    is(scalar(@req), 4, 'the fake model got 4 requests (one per step)');
    like(json_encode($req[3] && $req[3]{json}{messages}), qr/CHECK alpha beta/,
         'the model read the command output (tool result in the last request)');
    ok(!grep({ ($_->{headers}{'x-api-key'} // '') ne $s->real->{ANTHROPIC_API_KEY} } @req),
       'the fake saw the real key');
    my @g = $s->github->requests;
    ok(scalar(grep { $_->{path} =~ m{/git-upload-pack$} && ($_->{auth} // '') eq 'ok' } @g),
       'the repository was cloned through the /github/ route');

    # the container is gone, the session volume stays
    ok(wait_until(60, sub { !$s->run_containers($id) }), 'the container was removed');
    my (undef, $vols) = SMCP::Docker::docker('volume', 'ls', '-q', '--filter',
                                             "label=smcp.session=$run->{sessionId}");
    like($vols, qr/^smcp-\Q$run->{sessionId}\E$/m, 'the session volume smcp-<sessionId> stays');
};

##############################################################################
# 2. two sessions at once; two runs of one session one after the other

subtest 'concurrency 2: sessions in parallel, runs of one session in order' => sub {
    my $t0 = time();
    my $a = $s->run_task(task => 'SCENARIO-SESSA: leave a note in notes.txt', title => 'A');
    my $b = $s->run_task(task => 'SCENARIO-SESSB: read the note of the previous run',
                         sessionId => $a->{sessionId});
    my $c = $s->run_task(task => 'SCENARIO-OTHER: something else, in a new session', title => 'C');
    is($b->{sessionId}, $a->{sessionId}, 'B is queued on the session of A');
    isnt($c->{sessionId}, $a->{sessionId}, 'C has a session of its own');

    my (%max, $both, $b_early);
    my %st;
    # (A and B one after the other: each an OpenCode start, over 100 s
    # each under make test's load)
    wait_until(450, sub {
        for my $x (['a', $a], ['b', $b], ['c', $c]) {
            $st{ $x->[0] } = $s->result($x->[1]{runId})->{status};
        }
        $both ||= $st{a} eq 'running' && $st{c} eq 'running';
        $b_early ||= $st{b} ne 'started' && !SMCP::Stack::terminal($st{a}) ? "$st{b} while A $st{a}" : undef;
        return SMCP::Stack::terminal($st{a}) && SMCP::Stack::terminal($st{b})
            && SMCP::Stack::terminal($st{c});
    }, 0.25);
    $s->timing('A+C in parallel, then B (run_task -> all done)', time() - $t0);
    ok($both, 'A and C were `running` at the same time');
    ok(!$b_early, 'B stayed `started` while A was not finished') or diag($b_early);

    my %r = map { ($_->[0] => $s->wait_done($_->[1]{runId}, 10)) } (['a', $a], ['b', $b], ['c', $c]);
    for (qw(a b c)) {
        is($r{$_}{status}, 'completed', "run $_: completed")
            or $s->diag_run($r{$_}{runId}, $runner);
    }
    is($r{a}{result}, $reply_a, 'A: result');
    is($r{b}{result}, $reply_b, 'B: result');
    is($r{c}{result}, $reply_c, 'C: result');

    my %h = map { ($_ => $s->run_hash($r{$_}{runId})) } qw(a b c);
    ok($h{b}{started_at} && $h{a}{finished_at} && $h{b}{started_at} >= $h{a}{finished_at},
       "B started ($h{b}{started_at}) after A finished ($h{a}{finished_at})");
    ok($h{a}{started_at} < $h{c}{finished_at} && $h{c}{started_at} < $h{a}{finished_at},
       'A and C overlapped (from their timestamps)');
    my ($sa, $fa, $sb) = map { iso2epoch($_) } $r{a}{startedAt}, $r{a}{finishedAt}, $r{b}{startedAt};
    ok($sb >= $fa, 'get_result: B.startedAt >= A.finishedAt');

    # B continues A's workspace and conversation
    my @tb = grep { ($_->{type} // '') eq 'tool_use' } agent_data($s->events($r{b}{runId}));
    is($tb[0] && $tb[0]{part}{tool}, 'bash', 'B: a bash tool call');
    is($tb[0] && $tb[0]{part}{state}{output}, $note, 'B: `cat notes.txt` shows the file run A wrote')
        or diag(json_encode($tb[0] && $tb[0]{part}{state}));
    my %oc = map {
        my ($x) = grep { $_->{sessionID} } agent_data($s->events($r{$_}{runId}));
        ($_ => $x && $x->{sessionID})
    } qw(a b c);
    ok($oc{a} && $oc{a} eq ($oc{b} // ''), "B continued A's OpenCode session ($oc{a})");
    isnt($oc{c}, $oc{a}, 'C has its own OpenCode session');
    is($t->redis('HGET', "smcp:session:$a->{sessionId}", 'opencode_session'), $oc{a},
       'session hash: opencode_session');
    my ($rb) = grep { ($_->{body} // '') =~ /SCENARIO-SESSB/ } $s->anthropic->requests;
    my $msgs = $rb ? $rb->{json}{messages} : [];
    my $mj = json_encode($msgs);
    ok(@$msgs >= 4, 'B\'s first model request carries the earlier conversation ('
                    . scalar(@$msgs) . ' messages)');
    like($mj, qr/SCENARIO-SESSA/, '... with A\'s task');
    like($mj, qr/\Q$reply_a\E/, '... and A\'s answer');
    like($mj, qr/notes\.txt/, '... and A\'s tool call');
    is(scalar(() = $mj =~ /SCENARIO-SESSB/g), 1, '... and B\'s task once');
    is_deeply([sort map { $_->{path} } @{ $r{b}{filesChanged} }], ['notes.txt'],
              'B: filesChanged (the session\'s uncommitted work: notes.txt)');
};

##############################################################################

ok($s->runner_alive($runner), 'the runner is still up');
my $log = $s->runner_log($runner);
unlike($log, qr/level=(error|crit)/, 'no error in the runner log')
    or diag(join "\n", grep { /level=(error|crit)/ } split /\n/, $log);
unlike($log, qr/\Q$s->real->{ANTHROPIC_API_KEY}\E|\Q$s->real->{GITHUB_TOKEN}\E/,
       'the runner log holds no real credential');
note("runner log:\n$log") if $ENV{SMCP_TEST_VERBOSE};

$s->stop_runner($runner, 'TERM');
$s->done;
