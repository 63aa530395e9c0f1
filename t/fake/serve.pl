#!/usr/bin/perl
# Run one fake upstream from t/lib/SMCP/Fakes.pm in the foreground, for manual
# runs and non-Perl tests:
#
#   perl t/fake/serve.pl anthropic|openai|github|github-git|github-api \
#        [--port N] [--addr A] [--opts JSON | --opts-file FILE]
#
# --opts takes the start_*() options as a JSON object (script turns must be
# JSON: no code refs), e.g. '{"key":"sk-x","chunk_delay":0.5,
# "script":[{"text":"hi"}]}'.  Prints one line
#   READY <url> pid=<server pid> dir=<state dir> log=<request log>
# then runs until SIGTERM/SIGINT (or stdin EOF with --stdin-eof), stopping
# the fake on the way out.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../lib";
use JSON::PP;
use Time::HiRes qw(sleep);
use SMCP::Fakes;

my $kind = shift @ARGV or die "usage: $0 KIND [--port N] [--addr A] [--opts JSON]\n";
my %o;
my $stdin_eof = 0;
while (@ARGV) {
    my $a = shift @ARGV;
    if    ($a eq '--port')      { $o{port} = shift @ARGV }
    elsif ($a eq '--addr')      { $o{addr} = shift @ARGV }
    elsif ($a eq '--dir')       { $o{dir} = shift @ARGV }
    elsif ($a eq '--opts')      { %o = (%o, %{ decode_json(shift @ARGV) }) }
    elsif ($a eq '--opts-file') {
        my $f = shift @ARGV;
        open(my $fh, '<', $f) or die "$f: $!\n";
        local $/;
        %o = (%o, %{ decode_json(<$fh>) });
    }
    elsif ($a eq '--stdin-eof') { $stdin_eof = 1 }
    else { die "unknown argument $a\n" }
}

my %start = (
    anthropic    => \&SMCP::Fakes::start_anthropic,
    openai       => \&SMCP::Fakes::start_openai,
    github       => \&SMCP::Fakes::start_github,
    'github-git' => \&SMCP::Fakes::start_github_git,
    'github-api' => \&SMCP::Fakes::start_github_api,
);
my $start = $start{$kind} or die "unknown kind $kind (" . join(' ', sort keys %start) . ")\n";
my $f = $start->(%o);
$| = 1;
print "READY ", $f->url, " pid=", $f->pid, " dir=", $f->dir, " log=", $f->log_file, "\n";

my $stop = 0;
$SIG{$_} = sub { $stop = 1 } for qw(TERM INT HUP);
if ($stdin_eof) {
    while (!$stop) {
        my $n = sysread(STDIN, my $buf, 4096);
        last if defined $n && $n == 0;
    }
} else {
    sleep(0.2) while !$stop && $f->running;
}
$f->stop;
exit 0;
