#!/usr/bin/env perl
# Session forks (issue 26, point 2): opencode_run_task with forkSessionId
# starts a new session from a copy of another's workspace and OpenCode
# conversation (runner/fork.c, run_create.lua).  Everything real but the
# model (redis, nginx with the module, the runner with its warm pool, the
# sandbox image, dockerd, the real OpenCode; the fake Anthropic).
#
#   1. a session's first run (on the pooled sandbox: its workspace is the
#      pool's volume) writes one.txt; a fork of it finds one.txt and the
#      conversation (the first run's task and answer in the model's
#      request), and a symbolic link the first run made as a link (the
#      copy follows none), writes two.txt; the forked session's hash says
#      fork_of and forked_at, its hold on the original's runs is gone, and
#      so is the sandbox held for the original's next run (nothing writes
#      to a workspace while it is copied)
#   2. the two go their own ways: the original's next run sees no
#      two.txt and nothing of the fork's conversation; the fork's next
#      run sees no three.txt (the original's) and nothing of its run
#   3. refused, nothing written: both sessionId and forkSessionId, a
#      malformed id, an unknown session, another tenant's session (word
#      for word as an unknown one), a session with a run going
#   4. a workspace over a run's limits (here --workspace-inodes) is not
#      copied: the fork's run fails saying it is too big to fork
#
# Needs root, Docker, `make` (module, runner) and redis-server; the sandbox
# image ($SMCP_SANDBOX_IMAGE) is built on first use.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use SMCP::Docker ();
use SMCP::Events qw(agent_data);
use SMCP::Stack qw(bash_step);
use SMCP::Test qw(json_encode wait_until);

my %SCRIPTS = (
    'SCENARIO-FORKA1' => [ bash_step('echo one > one.txt; ln -s /etc/passwd link; echo wrote-one',
                                      'Write one'),
                            { text => 'First done.' } ],
    'SCENARIO-FORKB1' => [ bash_step('cat one.txt; test -L link && echo "LINK=$(readlink link)"; '
                                      . 'echo two > two.txt', 'Write two'),
                            { text => 'Fork done.' } ],
    'SCENARIO-FORKA2' => [ bash_step('ls; echo three > three.txt', 'Look, write three'),
                            { text => 'Original again.' } ],
    'SCENARIO-FORKB2' => [ bash_step('ls', 'Look'),
                            { text => 'Fork again.' } ],
    'SCENARIO-FORKHANG' => [ bash_step('echo STARTED', 'Start'), { hang => 120 } ],
);

my $s = SMCP::Stack->new(scripts => \%SCRIPTS);
my $t = $s->t;
# a run's workspace holds 20,000 files and directories at most: a fork
# of one past that is refused (its copy would be past it too)
my $INODES = 20000;
my $r = $s->start_runner(concurrency => 2,
                         args => ['--pool', 1, '--workspace-inodes', $INODES]);

# the model's first request of a run: its body (by the run's task)
sub asked {
    my ($mark) = @_;
    my ($req) = grep { ($_->{body} // '') =~ /\Q$mark\E/ } $s->anthropic->requests;
    return $req ? $req->{body} : '';
}

sub text_of { SMCP::Test::result_text($_[0]) // '' }

# what the run's tool calls printed, one after the other
sub outputs {
    my ($run) = @_;
    return join "\n", map { $_->{part}{state}{output} // '' }
        grep { ($_->{type} // '') eq 'tool_use' } agent_data($s->events($run));
}

sub session_hash { return $t->redis_hgetall("smcp:session:$_[0]") || {} }

##############################################################################

my ($a1, $b1);

subtest 'a fork: the workspace and the conversation copied' => sub {
    ok($s->wait_pool_warm($r, 300), 'the pool warm');
    ($a1) = $s->run_completed('the first run', $r, task => 'SCENARIO-FORKA1: start');
    like(outputs($a1->{runId}), qr/wrote-one/, '... wrote one.txt');
    my $pooled = session_hash($a1->{sessionId})->{volume} // '';
    like($pooled, qr/^smcp-pool-[0-9a-f]+$/, '... on the pooled sandbox\'s volume');

    ok(wait_until(60, sub {
        my (undef, $o) = SMCP::Docker::docker('ps', '-aq', '--filter',
                                              "label=smcp.hold=$a1->{sessionId}");
        ($o // '') =~ /\S/ }, 0.5), 'a sandbox held for the original\'s next run');

    ($b1) = $s->run_completed('the fork\'s first run', $r,
                              task => 'SCENARIO-FORKB1: branch off',
                              forkSessionId => $a1->{sessionId});
    isnt($b1->{sessionId}, $a1->{sessionId}, 'a new session');
    my $out = outputs($b1->{runId});
    like($out, qr/^one$/m, 'one.txt is in the fork\'s workspace');
    like($out, qr{^LINK=/etc/passwd$}m, '... and the link, a link still');
    my $body = asked('SCENARIO-FORKB1');
    ok(index($body, 'SCENARIO-FORKA1') >= 0 && index($body, 'First done.') >= 0,
       'the model is asked with the first run\'s conversation')
        or diag('asked: ' . ($body eq '' ? 'never' : scalar(() = $body =~ /"role"/g) . ' messages')
                . '; events: ' . join(' ', map { $_->{type} // '?' } agent_data($s->events($b1->{runId}))));
    my $h = session_hash($b1->{sessionId});
    is($h->{fork_of}, $a1->{sessionId}, 'the fork\'s session: fork_of');
    like($h->{forked_at} // '', qr/^\d{13}$/, '... forked_at (the copy whole)');
    is($h->{volume}, undef, '... its own volume, smcp-<session>');
    is($t->redis('ZCARD', "smcp:session:$a1->{sessionId}:forks"), 0,
       'the original\'s runs are held no longer');
    my $ha = session_hash($a1->{sessionId});
    is($ha->{volume}, $pooled, 'the original keeps its volume');
    my (undef, $held) = SMCP::Docker::docker('ps', '-aq', '--filter',
                                             "label=smcp.hold=$a1->{sessionId}");
    is($held // '', '', 'no sandbox held for the original\'s next run (it went before the copy)');
};

subtest 'the two go their own ways' => sub {
    my ($a2) = $s->run_completed('the original\'s next run', $r,
                                 task => 'SCENARIO-FORKA2: again',
                                 sessionId => $a1->{sessionId});
    my $out = outputs($a2->{runId});
    like($out, qr/^one\.txt$/m, 'the original has one.txt');
    unlike($out, qr/two\.txt/, '... and not the fork\'s two.txt');
    my $body = asked('SCENARIO-FORKA2');
    ok($body ne '' && index($body, 'SCENARIO-FORKA1') >= 0
       && index($body, 'SCENARIO-FORKB1') < 0,
       '... its conversation without the fork\'s');

    my ($b2) = $s->run_completed('the fork\'s next run', $r,
                                 task => 'SCENARIO-FORKB2: again',
                                 sessionId => $b1->{sessionId});
    $out = outputs($b2->{runId});
    like($out, qr/^two\.txt$/m, 'the fork has its two.txt');
    like($out, qr/^one\.txt$/m, '... and one.txt');
    unlike($out, qr/three\.txt/, '... not the original\'s three.txt');
    $body = asked('SCENARIO-FORKB2');
    ok($body ne '' && index($body, 'SCENARIO-FORKB1') >= 0
       && index($body, 'SCENARIO-FORKA2') < 0,
       '... its conversation without the original\'s later run');
};

subtest 'refused, nothing written' => sub {
    my $sessions = $t->redis('ZCARD', 'smcp:sessions');
    my $active = session_hash($a1->{sessionId})->{last_active};
    my $refused = sub {
        my ($args, $re, $what, %o) = @_;
        my $res = $o{token}
            ? $t->call_tool($o{sid}, 'opencode_run_task', $args, token => $o{token})
            : $s->call('opencode_run_task', $args);
        ok($res->{isError}, "$what: isError") or diag(json_encode($res));
        like(text_of($res), $re, "... says why") if $re;
        return text_of($res);
    };
    $refused->({ task => 'x', sessionId => $a1->{sessionId},
                 forkSessionId => $a1->{sessionId} },
               qr/sessionId or forkSessionId, not both/, 'both');
    $refused->({ task => 'x', forkSessionId => 'ses_nope' },
               qr/Unknown forkSessionId: sessionIds look like ses_/, 'a malformed id');
    my $none = 'ses_' . ('0' x 24);
    my $unknown = $refused->({ task => 'x', forkSessionId => $none },
                             qr/Unknown forkSessionId: \Q$none\E/, 'an unknown session');

    my $tok = $t->token(sub => 'mallory');
    my $msid = $t->initialize(token => $tok);
    my $said = $refused->({ task => 'x', forkSessionId => $a1->{sessionId} }, undef,
                          'another tenant\'s session', token => $tok, sid => $msid);
    $said =~ s/\Q$a1->{sessionId}\E/$none/g;
    is($said, $unknown, '... word for word as an unknown one');

    is(session_hash($a1->{sessionId})->{last_active}, $active,
       '... the original not touched by any of them');

    my $hang = $s->run_task(task => 'SCENARIO-FORKHANG: wait',
                            sessionId => $a1->{sessionId});
    ok(wait_until(180, sub { outputs($hang->{runId}) =~ /STARTED/ }, 0.3),
       'the original has a run going') or $s->diag_run($hang->{runId}, $r);
    $active = session_hash($a1->{sessionId})->{last_active};
    $refused->({ task => 'x', forkSessionId => $a1->{sessionId} },
               qr/Session \Q$a1->{sessionId}\E has a run queued or going/,
               'a session with a run going');
    is($t->redis('ZCARD', 'smcp:sessions'), $sessions + 0, 'no session made by any of them');
    is(session_hash($a1->{sessionId})->{last_active}, $active,
       '... the original not touched by the refused fork');
    is($t->redis('ZCARD', "smcp:session:$a1->{sessionId}:forks"), 0, '... no hold');
    $s->call('opencode_cancel_run', { runId => $hang->{runId} });
    is($s->wait_done($hang->{runId}, 120)->{status}, 'cancelled', 'that run cancelled');
};

subtest 'a workspace over a run\'s limits is not copied' => sub {
    my $vol = session_hash($a1->{sessionId})->{volume};
    my (undef, $mp) = SMCP::Docker::docker('volume', 'inspect', '-f', '{{.Mountpoint}}', $vol);
    chomp $mp;
    ok(-d $mp, 'the original\'s workspace on the host') or return;
    my $dir = "$mp/many";
    mkdir $dir or die "$dir: $!";
    for my $i (1 .. $INODES) {
        open(my $fh, '>', "$dir/$i") or die "$dir/$i: $!";
        close $fh;
    }
    my $run = $s->run_task(task => 'SCENARIO-FORKB2: too big',
                           forkSessionId => $a1->{sessionId});
    my $res = $s->wait_done($run->{runId}, 180);
    is($res->{status}, 'failed', 'the fork\'s run failed');
    like($res->{error} // '', qr/workspace of session \Q$a1->{sessionId}\E is over a run's limits.*too big to fork/,
         '... saying the workspace is too big to fork');
    my $h = session_hash($run->{sessionId});
    ok(!$h->{forked_at}, '... nothing copied');
    my ($rc) = SMCP::Docker::docker('volume', 'inspect', "smcp-$run->{sessionId}");
    isnt($rc, 0, '... no volume made for it');
    is($t->redis('ZCARD', "smcp:session:$a1->{sessionId}:forks"), 0,
       '... and the original\'s runs not held');
    system('rm', '-rf', $dir);
};

$s->done;
