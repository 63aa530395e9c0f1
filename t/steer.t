#!/usr/bin/env perl
# Steering a running agent (issue 25, point 1), end to end: MCP through
# nginx, build/smcp-runner, dockerd, the sandbox image with the real
# OpenCode (the runner's warm pool: the run on the pooled sandbox's
# OpenCode server; last, a cold run on its own sandbox's server);
# the model and GitHub are the fakes of t/lib/SMCP/Fakes.pm.
#
#   1. opencode_send_message to a running run: the message is queued while
#      the agent is in a step (a bash command that sleeps), reaches the
#      model in the next request of the same session, and the run goes on
#      to complete.  The timeline has the message (who, how, its text) and
#      its delivery (the sandbox took it, after it was sent).  The same
#      with a cold run (no pool, no held sandbox): its own OpenCode server.
#   2. The egress inbox: without the run token, or with another run's
#      token once that run has ended, it is refused; its polls are not in
#      the egress audit record.
#   3. Refused, each with a clear answer and nothing written: a message to
#      a finished run (naming opencode_run_task and sessionId), to another
#      tenant's run (as an unknown run), from a token that does not grant
#      the run's repository, an empty one, one over 16384
#      bytes; a flood on a queued run: ten wait, the eleventh is refused
#      (the run's inbox holds ten), and cancelling the run leaves them
#      undelivered.
#
# Needs root, Docker, `make` and redis-server; CI=true turns skips into
# failures.  Uses $SMCP_SANDBOX_IMAGE.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Stack qw(bash_step);
use SMCP::Test qw(wait_until json_decode);

my $MARK = 'STEER-' . int(rand(1e9));
my $TEXT = "$MARK: also write NOTES.md with the word steered";

my $s = SMCP::Stack->new(
    scripts => {
        # the step the message arrives in: a command that takes 8 s
        'SCENARIO-STEER' => [ bash_step('sleep 8; echo slept', 'Wait'),
                              { text => 'Steered and done.' } ],
        'SCENARIO-QUICK' => [ { text => 'Quick.' } ],
    },
    repos => { 'acme/app' => { 'README.md' => "# app\n" } },
);
my $t = $s->t;
my $fake = $s->anthropic;
my $APP = 'https://github.com/acme/app';

sub text_of { SMCP::Test::result_text($_[0]) }

sub message_events {
    my ($id) = @_;
    return grep { ($_->{type} // '') eq 'message' } $s->stored_events($id);
}

# the model requests whose conversation holds $text
sub requests_with {
    my ($text) = @_;
    return grep { ($_->{body} // '') =~ /\Q$text\E/ }
           $fake->requests(path => qr{/messages$});
}

# -- 3 (first half): a queued run, before any runner is started ----------

my $queued = $s->run_task(task => 'SCENARIO-QUICK: wait for a runner',
                          repository => $APP);
my $qid = $queued->{runId};

subtest 'refused: empty, oversized, another tenant\'s run' => sub {
    my $res = $s->call('opencode_send_message', { runId => $qid, message => '' });
    ok($res->{isError} || $res->{error}, 'an empty message: refused');
    like(text_of($res) . ($res->{error}{message} // ''), qr/message/i, '... naming the argument');

    $res = $s->call('opencode_send_message', { runId => $qid, message => 'x' x 16385 });
    ok($res->{isError} || $res->{error}, 'a message of 16385 bytes: refused');
    like(text_of($res) . ($res->{error}{message} // ''), qr/message/i, '... naming the argument');

    $res = $s->call('opencode_send_message', { runId => $qid });
    ok($res->{isError} || $res->{error}, 'no message: refused');

    my $tok = $t->token(sub => 'mallory');
    my $msid = $t->initialize(token => $tok);
    $res = $t->call_tool($msid, 'opencode_send_message',
                         { runId => $qid, message => 'hijack' }, token => $tok);
    ok($res->{isError}, 'another tenant\'s run: isError');
    my $unknown = $t->call_tool($msid, 'opencode_send_message',
        { runId => 'run_' . ('0' x 24), message => 'hijack' }, token => $tok);
    (my $said = text_of($res)) =~ s/\Q$qid\E/run_${\('0' x 24)}/g;
    is($said, text_of($unknown), '... word for word as an unknown run');

    my $narrow = $t->token(repos => ['acme/lib']);
    my $nsid = $t->initialize(token => $narrow);
    $res = $t->call_tool($nsid, 'opencode_send_message',
                         { runId => $qid, message => 'push elsewhere' }, token => $narrow);
    ok($res->{isError}, 'a token that does not grant the run\'s repository: isError');
    like(text_of($res), qr{works on https://github\.com/acme/app, which this token does not grant},
         '... naming the repository') or diag(text_of($res));

    is(scalar(message_events($qid)), 0, 'nothing in the timeline');
    is($t->redis('LLEN', "smcp:run:$qid:inbox"), 0, 'nothing in the inbox');
};

subtest 'a flood: ten wait, the eleventh is refused' => sub {
    for my $i (1 .. 10) {
        my $sc = SMCP::Test::sc($s->call('opencode_send_message',
                                         { runId => $qid, message => "flood $i" }));
        is_deeply($sc, { runId => $qid, messageId => $i, status => 'queued', waiting => $i },
                  "message $i queued") or last;
    }
    my $res = $s->call('opencode_send_message', { runId => $qid, message => 'flood 11' });
    ok($res->{isError}, 'the eleventh: isError');
    like(text_of($res), qr/already has 10 messages/, '... saying the inbox is full')
        or diag(text_of($res));
    is($t->redis('LLEN', "smcp:run:$qid:inbox"), 10, 'ten in the inbox');
    is(scalar(message_events($qid)), 10, 'ten in the timeline');

    my $c = SMCP::Test::sc($s->call('opencode_cancel_run', { runId => $qid }));
    is($c->{status}, 'cancelled', 'the queued run cancelled');
    $res = $s->call('opencode_send_message', { runId => $qid, message => 'after' });
    ok($res->{isError}, 'a message to the cancelled run: isError');
    like(text_of($res), qr/has ended \(cancelled\).*opencode_run_task.*sessionId/s,
         '... naming opencode_run_task and sessionId') or diag(text_of($res));
};

# -- 1: a message to a running agent ---------------------------------------

# a pooled sandbox first: its warm OpenCode server takes the run (a cold
# run's own server, last)
my $runner = $s->start_runner(concurrency => 2, args => ['--pool', 1]);

# the pooled sandbox warmed (its server started and prompted once)
ok($s->wait_pool_warm($runner), 'the pooled sandbox is warm');

my $run = $s->run_task(task => 'SCENARIO-STEER: look around', repository => $APP);
my $id = $run->{runId};
my $sent_at;

subtest 'the message reaches the model in the next request' => sub {
    # the agent is in its 8 s step once the model asked for the command
    ok(wait_until(120, sub { scalar(requests_with('SCENARIO-STEER')) >= 1 }),
       'the first model request came') or $s->diag_run($id, $runner);
    sleep 1;
    $sent_at = time();
    my $sc = SMCP::Test::sc($s->call('opencode_send_message', { runId => $id, message => $TEXT }));
    is_deeply($sc, { runId => $id, messageId => 1, status => 'queued', waiting => 1 },
              'queued') or diag(explain($sc));

    my $res = $s->wait_done($id, 180);
    is($res->{status}, 'completed', 'the run goes on and completes')
        or $s->diag_run($id, $runner);
    my ($start) = grep { ($_->{json}{step} // '') eq 'agent_start' } $s->stored_events($id);
    ok($start && $start->{json}{warm}, 'it ran on the pooled sandbox\'s warm server');

    my @req = $fake->requests(path => qr{/messages$});
    my @with = requests_with($MARK);
    ok(@with >= 1, 'a model request carries the message') or diag(scalar(@req) . ' requests');
    my $first = $with[0] // {};
    my ($last_user) = reverse grep { ($_->{role} // '') eq 'user' }
                      @{ $first->{json}{messages} || [] };
    my @texts = map { $_->{text} // '' } grep { ($_->{type} // '') eq 'text' }
                @{ ref $last_user->{content} eq 'ARRAY' ? $last_user->{content} : [] };
    ok((grep { $_ eq $TEXT } @texts), '... as a user text of the latest turn, unchanged');
    my @results = grep { ($_->{type} // '') eq 'tool_result' }
                  @{ ref $last_user->{content} eq 'ARRAY' ? $last_user->{content} : [] };
    ok(@results, '... after the result of the step it arrived in (the same session)');
    ok(($first->{time} // 0) >= $sent_at, '... sent after the message was');
};

subtest 'the timeline: sent, then delivered' => sub {
    my @m = message_events($id);
    is(scalar(@m), 2, 'two message events') or diag(explain(\@m));
    my ($sent, $took) = map { $_->{json} } @m;
    is_deeply($sent, { id => 1, from => $t->{tenant}, via => 'mcp', text => $TEXT },
              'sent: its id, who, how, the text')
        or diag(explain($sent));
    is_deeply($took, { id => 1, delivered => JSON::PP::true() }, 'delivered: its id')
        or diag(explain($took));
    ok($m[1]{ts} >= $m[0]{ts}, 'delivered after sent');

    my @ev = $s->events($id);
    ok((grep { ($_->{type} // '') eq 'message' } @ev) == 2,
       'opencode_get_events shows both');

    my @polls = grep { ($_->{type} // '') eq 'egress' && ($_->{json}{route} // '') eq 'inbox' }
                $s->stored_events($id);
    is(scalar(@polls), 0, 'the inbox polls are not in the egress record');
    is($t->redis('LLEN', "smcp:run:$id:inbox"), 0, 'the inbox is empty');
};

subtest 'a finished run: refused, naming the way on' => sub {
    my $res = $s->call('opencode_send_message', { runId => $id, message => 'too late' });
    ok($res->{isError}, 'isError');
    like(text_of($res), qr/has ended \(completed\).*opencode_run_task.*sessionId/s,
         'names opencode_run_task with sessionId') or diag(text_of($res));
    is(scalar(message_events($id)), 2, 'nothing added to the timeline');
};

# -- 2: the inbox itself ---------------------------------------------------

subtest 'the egress inbox refuses what is not a live run\'s' => sub {
    my $url = $s->egress_url . '/smcp/inbox';
    my $code = sub {
        open(my $fh, '-|', 'curl', '-s', '-o', '/dev/null', '-w', '%{http_code}',
             '-m', '10', (map { ('-H', $_) } @_), $url) or return 'curl';
        local $/;
        return scalar <$fh>;
    };
    is($code->(), '401', 'no token: 401');
    my $ended = $t->token(scope => 'egress', run => $id, repos => undef);
    is($code->("Authorization: Bearer $ended"), '401', 'the ended run\'s token: 401');
    is($code->('Authorization: Bearer not.a.token'), '401', 'a forged token: 401');
};

# -- 1 (every run): a cold run takes messages too --------------------------

# no pool and no held sandbox: the run's own sandbox starts OpenCode's
# server (cold_server, entrypoint.sh) and the message reaches the model
$s->stop_runner($runner);
my $cold_runner = $s->start_runner(concurrency => 2,
                                   args => ['--pool', 0, '--session-hold', 0]);
my $MARK2 = 'COLD-' . int(rand(1e9));
my $TEXT2 = "$MARK2: and a cold run hears it";

subtest 'a cold run: the message reaches the model too' => sub {
    my $cold = $s->run_task(task => 'SCENARIO-STEER: look around, cold', repository => $APP);
    my $cid = $cold->{runId};
    ok(wait_until(240, sub { scalar(requests_with('look around, cold')) >= 1 }),
       'the first model request came') or $s->diag_run($cid, $cold_runner);
    sleep 1;
    my $at = time();
    my $sc = SMCP::Test::sc($s->call('opencode_send_message',
                                     { runId => $cid, message => $TEXT2 }));
    is($sc->{status}, 'queued', 'queued') or diag(explain($sc));
    my $res = $s->wait_done($cid, 180);
    is($res->{status}, 'completed', 'the run goes on and completes')
        or $s->diag_run($cid, $cold_runner);
    my ($start) = grep { ($_->{json}{step} // '') eq 'agent_start' } $s->stored_events($cid);
    ok($start && !$start->{json}{warm}, 'a cold run (agent_start without "warm")')
        or diag(explain($start && $start->{json}));
    my @with = requests_with($MARK2);
    ok(@with >= 1, 'a model request carries the message');
    ok(@with && ($with[0]{time} // 0) >= $at, '... sent after the message was');
    my @m = map { $_->{json} } message_events($cid);
    is_deeply([ map { $_->{delivered} ? 'delivered' : 'sent' } @m ], [qw(sent delivered)],
              'the timeline: sent, then delivered') or diag(explain(\@m));
};

$s->done;
