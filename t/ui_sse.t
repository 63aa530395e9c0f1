#!/usr/bin/perl

# The dashboard's live streams (sandbox_mcp_ui at /ui/): a run's events as
# text/event-stream - the stored ones in order (across pages), then new ones
# as the run's channel announces them; Last-Event-ID resumes after that id;
# a comment heartbeat (sandbox_mcp_ui_heartbeat); `event: end` and the end
# of the answer once the run has ended; a hostile event type cannot break
# the framing; 200 watchers of one run all get every event, and the Redis
# connections do not grow with them (one pub/sub connection per worker),
# and the streams that are up to date share their reads; an nginx reload
# ends the streams and the clients resume; the tenant's stream says every
# status change, and is dropped when its client reads nothing past
# sandbox_mcp_ui_stream_buffer; pages cut at that size still deliver
# everything; Redis away: 503.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);
use SMCP::Test qw(json_decode now_ms rhex wait_until);
use SMCP::UI;

my $t = SMCP::Test->new(
    workers => 2,
    server  => q{
        location /ui/ {
            sandbox_mcp_ui;
            sandbox_mcp_ui_heartbeat 300ms;
        }
        location /small/ {
            sandbox_mcp_ui;
            sandbox_mcp_ui_stream_buffer 4k;
        }},
);
$t->start;

my $P = 'smcp:';
my $ui = SMCP::UI->new($t);
my $tok = $t->token(scope => 'ui', repos => undef);
my $C = "smcp_ui=$tok";

sub new_run {
    my (%f) = @_;
    my $id = 'run_' . rhex();
    $t->redis('HSET', "${P}run:$id", tenant => 'alice', status => 'running',
              created_at => now_ms(), %f);
    return $id;
}

# an event stored as the runner stores it, then the ping
sub event {
    my ($id, $type, $data, %o) = @_;
    my $eid = $t->redis('XADD', "${P}run:$id:events", '*', type => $type,
                        data => $data, ts => now_ms());
    $t->redis('PUBLISH', "${P}run:$id", $type) unless $o{quiet};
    return $eid;
}

sub ids { return [ map { $_->{id} } grep { defined $_->{id} } @{ $_[0]->events } ] }

###############################################################################
# order, then live, heartbeat, end

my $id = new_run();
my @ids = map { event($id, 'agent', "{\"n\":$_}", quiet => 1) } 1 .. 3;

my $s = $ui->sse("/ui/runs/$id/events", cookie => $C);
ok($s->pump(15, sub { @{ ids($_[0]) } >= 3 }), 'the stored events come');
is($s->status, 200, 'status 200');
is($s->headers->{'content-type'}, 'text/event-stream', 'text/event-stream');
is($s->headers->{'cache-control'}, 'no-store', 'no-store');
like($s->headers->{'content-security-policy'} // '', qr/frame-ancestors 'none'/, 'CSP');
is_deeply(ids($s), \@ids, 'in order, id: the stream id');
my $e = $s->events->[0];
is($e->{event}, 'agent', 'event: the type');
is_deeply([ sort keys %{ $e->{json} } ], [ qw(data id time type) ], 'data: {id,type,time,data}');
is_deeply($e->{json}{data}, { n => 1 }, '... the event data');
is($e->{json}{id}, $ids[0], '... its id');
like($e->{json}{time} // '', qr/^\d{4}-\d\d-\d\dT/, '... its time');
like($s->body, qr/^retry: \d+\n\n/, 'a retry interval first');

push @ids, event($id, 'tool', '{"title":"live"}');
ok($s->pump(15, sub { @{ ids($_[0]) } >= 4 }), 'a new event comes on the open stream');
is_deeply(ids($s), \@ids, '... after the others');

my $c0 = $s->comments;
ok($s->pump(15, sub { $_[0]->comments >= $c0 + 2 }), 'heartbeat comments while idle');
ok(!$s->closed, '... the stream stays open');

# a hostile type: framing holds
my $evil = event($id, "x\ndata: {\"pwned\":1}\n\nevent: end", '"<img src=x onerror=alert(1)>"');
push @ids, $evil;
ok($s->pump(15, sub { @{ ids($_[0]) } >= 5 }), 'an event with a hostile type');
my ($he) = grep { ($_->{id} // '') eq $evil } @{ $s->events };
is($he->{event}, 'unknown', '... framed as "unknown"');
is($he->{json}{type}, "x\ndata: {\"pwned\":1}\n\nevent: end", '... its type kept as data');
is($he->{json}{data}, '<img src=x onerror=alert(1)>', '... its data as JSON text');
ok(!grep({ ($_->{event} // '') eq 'end' || exists(($_->{json} || {})->{pwned}) }
         @{ $s->events }), '... no event injected');

# the end
$t->redis('HSET', "${P}run:$id", status => 'completed');
push @ids, event($id, 'lifecycle', '{"status":"completed"}');
ok($s->pump(15, sub { $_[0]->ended }), 'the run ended: the answer ends');
is_deeply(ids($s), \@ids, '... after every event');
is($s->events->[-1]{event}, 'end', '... with event: end');
$s->close;

# an ended run: everything, then the end, at once
$s = $ui->sse("/ui/runs/$id/events", cookie => $C);
ok($s->pump(15, sub { $_[0]->ended }), 'an ended run: the whole stream, then the end');
is_deeply(ids($s), \@ids, '... every event');
$s->close;

###############################################################################
# Last-Event-ID

$s = $ui->sse("/ui/runs/$id/events", cookie => $C, last_id => $ids[1]);
ok($s->pump(15, sub { $_[0]->ended }), 'Last-Event-ID');
is_deeply(ids($s), [ @ids[2 .. $#ids] ], '... resumes after that id');
$s->close;

$s = $ui->sse("/ui/runs/$id/events", cookie => $C, last_id => "bogus\r\nX: y");
ok($s->pump(15, sub { $_[0]->ended }), 'a Last-Event-ID that is not an id');
is_deeply(ids($s), \@ids, '... is ignored: everything');
$s->close;

###############################################################################
# pages: 250 stored events, in order; cut at a small buffer

my $big = new_run(status => 'completed');
my @bids = map { event($big, 'agent', '{"x":"' . ('y' x 900) . "\",\"n\":$_}", quiet => 1) } 1 .. 250;
for my $loc ('ui', 'small') {
    my $b = $ui->sse("/$loc/runs/$big/events", cookie => $C);
    ok($b->pump(20, sub { $_[0]->ended }), "/$loc/: 250 events");
    is_deeply(ids($b), \@bids, '... all, in order');
    $b->close;
}

###############################################################################
# 200 watchers of one run

sub evalsha_calls {
    my $s = $t->redis('INFO', 'commandstats');
    return $s =~ /^cmdstat_evalsha:calls=(\d+)/m ? $1 : 0;
}

sub redis_clients {
    my $list = $t->redis('CLIENT', 'LIST');
    return scalar grep { /\S/ } split /\n/, $list;
}

{
    my $wid = new_run();
    my $first = event($wid, 'agent', '{"n":0}', quiet => 1);
    my $before = redis_clients();
    my @w = map { $ui->sse("/ui/runs/$wid/events", cookie => $C) } 1 .. 200;
    SMCP::UI::pump_all(\@w, 30, sub { !grep { @{ ids($_) } < 1 } @w });
    is(scalar(grep { @{ ids($_) } == 1 } @w), 200, '200 watchers: each has the stored event');
    is(scalar(grep { $_->status == 200 } @w), 200, '... each 200');
    is(redis_clients(), $before, 'Redis connections: as many as before the 200 streams');

    my $reads0 = evalsha_calls();
    my @want = ($first);
    for my $n (1 .. 5) {
        push @want, event($wid, 'agent', "{\"n\":$n}");
        SMCP::UI::pump_all(\@w, 30, sub { !grep { @{ ids($_) } < 1 + $n } @w });
    }
    is(scalar(grep { join(',', @{ ids($_) }) eq join(',', @want) } @w), 200,
       '... all 200 got every new event, in order');
    my $reads = evalsha_calls() - $reads0;
    cmp_ok($reads, '<', 200 * 5 / 4,
           "... the streams up to date read together ($reads reads for 5 events "
           . 'x 200 streams)');
    $_->close for @w;
}

###############################################################################
# reload: the streams end, the clients resume without a gap

{
    my $rid = new_run();
    my @want = map { event($rid, 'agent', "{\"n\":$_}", quiet => 1) } 1 .. 2;
    my @w = map { $ui->sse("/ui/runs/$rid/events", cookie => $C) } 1 .. 4;
    SMCP::UI::pump_all(\@w, 10, sub { !grep { @{ ids($_) } < 2 } @w });
    ok($t->reload, 'nginx reload');
    SMCP::UI::pump_all(\@w, 10, sub { !grep { !$_->closed } @w });
    is(scalar(grep { $_->closed } @w), 4, 'reload: the streams were ended');
    push @want, event($rid, 'agent', '{"n":3}');    # while nobody listens
    my @again = map { $ui->sse("/ui/runs/$rid/events", cookie => $C,
                               last_id => ids($_)->[-1]) } @w;
    push @want, event($rid, 'agent', '{"n":4}') if SMCP::UI::pump_all(\@again, 5,
        sub { !grep { $_->status != 200 } @again });
    SMCP::UI::pump_all(\@again, 10, sub { !grep { @{ ids($_) } < 2 } @again });
    is(scalar(grep { join(',', @{ ids($w[0]) }, @{ ids($_) }) eq join(',', @want) } @again), 4,
       '... resumed with Last-Event-ID: nothing missed, nothing twice');
    $_->close for @again;
}

###############################################################################
# the tenant's stream

{
    my $ts = $ui->sse('/ui/api/stream', cookie => $C);
    ok($ts->pump(15, sub { $_[0]->status }), 'tenant stream');
    is($ts->status, 200, '... 200');
    is($ts->headers->{'content-type'}, 'text/event-stream', '... event-stream');
    my $bob = $ui->sse('/ui/api/stream',
                       cookie => 'smcp_ui=' . $t->token(sub => 'bob', scope => 'ui', repos => undef));
    # its head comes once it listens to bob's channel
    ok($bob->pump(15, sub { $_[0]->status }), "another tenant's stream (bob's)");

    my ($sid) = $t->initialize;
    my $run = SMCP::Test::sc($t->call_tool($sid, 'opencode_run_task', { task => 'stream me' })) || {};
    ok($ts->pump(15, sub { grep { ($_->{event} // '') eq 'run' } @{ $_[0]->events } }),
       'a new run: said');
    my @runs = grep { ($_->{event} // '') eq 'run' } @{ $ts->events };
    is_deeply($runs[0]{json}, { runId => $run->{runId}, status => 'started' },
              '... event: run {runId, status}');
    $t->call_tool($sid, 'opencode_cancel_run', { runId => $run->{runId} });
    ok($ts->pump(15, sub { grep { ($_->{json}{status} // '') eq 'cancelled' } @{ $_[0]->events } }),
       'cancelled: said');
    $bob->pump(1);
    is(scalar(grep { ($_->{event} // '') eq 'run' } @{ $bob->events }), 0,
       "another tenant's stream hears nothing of it");
    $ts->close;
    $bob->close;
}

###############################################################################
# a tenant stream that is not read: dropped past sandbox_mcp_ui_stream_buffer

{
    my $slow = $ui->sse('/small/api/stream', cookie => $C);
    ok($slow->pump(15, sub { $_[0]->status }), 'a tenant stream nobody reads');
    my $id = 'run_' . rhex();
    my $rc = $t->redis_connect(timeout => 30);
    my $msg = SMCP::Test::Redis::_encode('PUBLISH', "${P}tenant:alice", "$id running");
    my $n = 100000;
    my $burst = $msg x 1000;
    for (1 .. $n / 1000) {
        my $off = 0;
        while ($off < length $burst) {
            my $w = syswrite($rc->{sock}, $burst, length($burst) - $off, $off);
            die "redis write: $!" unless defined $w;
            $off += $w;
        }
    }
    $rc->read_reply(30) for 1 .. $n;
    $rc->close;
    ok(wait_until(10, sub { $t->error_log =~ /ui stream dropped: the client reads too slowly/ }),
       '... is dropped once its unsent messages pass the buffer (logged)');
    # what the socket held, then the end
    $slow->pump(60, sub { $_[0]->closed });
    ok($slow->closed, '... the connection closed');
    my $got = grep { ($_->{event} // '') eq 'run' } @{ $slow->events };
    ok($got < $n, "... after $got of $n messages (the rest is not kept)");
}

###############################################################################
# HEAD, and Redis away

{
    my $id = new_run();
    my $r = $t->http(method => 'HEAD', path => "/ui/runs/$id/events", headers => [Cookie => $C]);
    is($r->{status}, 200, 'HEAD of a stream: 200, the head only');
    $t->stop_redis;
    $r = $t->http(path => "/ui/runs/$id/events", headers => [Cookie => $C], timeout => 10);
    is($r->{status}, 503, 'Redis away: the stream answers 503');
    like($r->{headers}{'retry-after'} // '', qr/^\d+$/, '... with Retry-After');
    $r = $t->http(path => "/ui/runs/$id/data", headers => [Cookie => $C], timeout => 10);
    is($r->{status}, 503, '... and the data 503');
}

$t->done;
