#!/usr/bin/env perl
# Limits of the egress proxy: requests per run (limit_req keyed by
# $sandbox_mcp_token_run, the run of a token whose signature, expiry and
# scope check out, without Redis), answered with a JSON 429 and
# Retry-After; a forged or expired token never spends a run's budget.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);
use SMCP::Test qw(:all);
use SMCP::Fakes;

my $root = repo_root();

sub rnd { return join '', map { sprintf '%02x', int(rand(256)) } 1 .. 12 }

my $real = 'sk-compat-REAL-' . rnd();
my $t = SMCP::Test->new(workers => 2);
my $compat = SMCP::Fakes::start_openai(key => $real);

sub render_routes {
    my ($t, %env) = @_;
    local @ENV{keys %env} = values %env;
    delete local @ENV{qw(ANTHROPIC_API_KEY OPENAI_API_KEY AZURE_OPENAI_API_KEY
                         GOOGLE_API_KEY CF_AIG_TOKEN GITHUB_TOKEN)};
    for my $part ('--http', '') {
        my $out = `$root/ngx_sandbox_mcp_module/conf/egress-routes.sh $part 2>&1`;
        die "egress-routes.sh $part: $out" if $?;
        open(my $fh, '>', $t->dir . ($part ? '/routes-http.conf' : '/routes.conf'))
            or die $!;
        print $fh $out;
        close $fh;
    }
}

# bad settings are refused by the script, not by nginx at start
for my $bad ([ SMCP_EGRESS_RATE => '10' ], [ SMCP_EGRESS_RATE => '1r/s; evil' ],
             [ SMCP_EGRESS_BURST => 'x' ]) {
    local $ENV{$bad->[0]} = $bad->[1];
    my $out = `$root/ngx_sandbox_mcp_module/conf/egress-routes.sh --http 2>&1`;
    isnt($?, 0, "egress-routes.sh refuses $bad->[0]=$bad->[1]");
}

# the key: in the environment of the routes script and of nginx's master
$ENV{COMPAT_API_KEY} = $real;
my $eport = $t->free_port;
render_routes($t, COMPAT_BASE_URL => $compat->url,
              SMCP_EGRESS_RATE => '2r/s', SMCP_EGRESS_BURST => 3);
$t->start(http => <<"NGINX");
    include %%DIR%%/routes-http.conf;
    server {
        listen 127.0.0.1:$eport;
        include %%DIR%%/routes.conf;
    }
NGINX

my (%tok, %id);
for my $who (qw(a b)) {
    $id{$who} = 'run_' . rnd();
    $t->redis('HSET', "smcp:run:$id{$who}", tenant => 'alice', status => 'running');
    $tok{$who} = $t->token(sub => 'alice', scope => 'egress', run => $id{$who},
                           exp => int(time()) + 600);
}
my $forged = $t->token(sub => 'alice', scope => 'egress', run => $id{a},
                       secret => 'not-the-secret-0123456789');
my $expired = $t->token(sub => 'alice', scope => 'egress', run => $id{a},
                        exp => int(time()) - 5);
my $mcp = $t->token(sub => 'alice', scope => 'mcp', run => $id{a});

my $body = '{"model":"m","messages":[{"role":"user","content":"hi"}]}';
sub call {
    my ($tok) = @_;
    return $t->http(port => $eport, method => 'POST', path => '/compat/v1/chat/completions',
                    headers => [ Authorization => "Bearer $tok",
                                 'Content-Type' => 'application/json' ],
                    body => $body, timeout => 10);
}

# forged, expired and MCP tokens naming run a: refused (401), and they do
# not count against run a (limit_req runs before the access phase)
for (1 .. 12) {
    is(call($_ % 3 == 0 ? $forged : $_ % 3 == 1 ? $expired : $mcp)->{status},
       401, "bad token $_ naming run a: 401, not 429");
}

my @st = map { call($tok{a})->{status} } 1 .. 10;
is(scalar(grep { $_ == 200 } @st), 4, 'run a: 1 + burst 3 requests pass at once')
    or diag("@st");
is(scalar(grep { $_ == 429 } @st), 6, 'run a: the rest get 429');
my $r = call($tok{a});
is($r->{status}, 429, 'run a: still limited');
my $j = json_decode($r->{body}) // {};
is($j->{type}, 'error', '429: a JSON error');
is($j->{error}{type}, 'rate_limit_error', '429: rate_limit_error');
is($r->{headers}{'retry-after'}, '1', '429: Retry-After: 1');
like($r->{headers}{'content-type'} // '', qr{application/json}, '429: application/json');

is(call($tok{b})->{status}, 200, 'run b: its own budget');
is(call($forged)->{status}, 401, 'a forged token for run a while a is limited: 401');

sleep(1.1);
is(call($tok{a})->{status}, 200, 'run a: passes again a second later (2r/s)');

# limited requests stop before the access phase: neither proxied nor
# audited (the audit is written after the response: wait for it)
my @d;
wait_until(5, sub {
    my $ev = $t->redis('XRANGE', "smcp:run:$id{a}:events", '-', '+');
    @d = map { my %f = @{ $_->[1] }; json_decode($f{data}) } @$ev;
    return @d >= 5;
});
is(scalar(grep { $_->{status} == 200 } @d), 5, 'audit: the five granted requests of run a');
is(scalar(grep { $_->{status} == 429 } @d), 0, 'audit: no limited one');
is(scalar(@{ $compat->requests }), 6, 'upstream: exactly the granted requests (5 of a, 1 of b)');

$t->allow_log(qr/limiting requests/);
$compat->stop;
$t->done;
