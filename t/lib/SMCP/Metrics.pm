package SMCP::Metrics;

# Prometheus for the tests: a strict parser of the text format (the
# module's and the runner's /metrics) and a real Prometheus server
# (Debian's `prometheus`) scraping targets every second, asked through its
# HTTP query API.

use strict;
use warnings;

use Exporter 'import';
use File::Path qw(make_path);
use HTTP::Tiny;
use SMCP::Test qw(json_decode wait_until which_bin);

our @EXPORT_OK = qw(parse_metrics metric_value scrape_value);

my $NAME = qr/[a-zA-Z_:][a-zA-Z0-9_:]*/;
my $VALUE = qr/[-+]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|Inf|NaN)/;

# parse_metrics($text): ($m, undef) or (undef, "the first bad line");
# $m->{types}{name} = counter|gauge|histogram, $m->{samples} = [{ name,
# labels => {k => v}, value, line }]
sub parse_metrics {
    my ($text) = @_;
    my %m = (types => {}, samples => []);
    return (undef, 'no text') unless defined $text && length $text;
    return (undef, 'no final newline') unless $text =~ /\n\z/;
    for my $line (split /\n/, $text) {
        if (my ($kind, $n, $rest) = $line =~ /^# (HELP|TYPE) ($NAME) (.*)$/) {
            if ($kind eq 'TYPE') {
                return (undef, "bad type: $line")
                    unless $rest =~ /^(counter|gauge|histogram|summary|untyped)$/;
                $m{types}{$n} = $rest;
            }
            next;
        }
        my ($name, $labels, $value) =
            $line =~ /^($NAME)(?:\{(.*)\})? ($VALUE)$/ or return (undef, "bad line: $line");
        my %l;
        if (defined $labels && length $labels) {
            my $rest = $labels;
            while ($rest =~ s/^($NAME)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)//) {
                $l{$1} = $2;
                last if $3 eq '';
            }
            return (undef, "bad labels: $line") if length $rest;
        }
        push @{ $m{samples} }, { name => $name, labels => \%l,
                                 value => $value + 0, line => $line };
    }
    return (\%m, undef);
}

# the value of the sample of that name with exactly these labels (undef:
# none)
sub metric_value {
    my ($m, $name, $labels) = @_;
    return undef unless $m;
    for my $s (@{ $m->{samples} }) {
        next unless $s->{name} eq $name;
        next unless keys %{ $s->{labels} } == keys %$labels;
        next if grep { ($s->{labels}{$_} // "\0") ne $labels->{$_} } keys %$labels;
        return $s->{value};
    }
    return undef;
}

# scrape_value($port, $name, \%labels): the value of that sample of the
# /metrics served on 127.0.0.1:$port (labels: none unless given; undef:
# no such sample, or no answer)
sub scrape_value {
    my ($port, $name, $labels) = @_;
    my $res = HTTP::Tiny->new(timeout => 5)->get("http://127.0.0.1:$port/metrics");
    my ($m) = $res->{success} ? parse_metrics($res->{content}) : ();
    return metric_value($m, $name, $labels // {});
}

# SMCP::Metrics->start_prometheus($t, jobs => { name => "host:port", ... }):
# a Prometheus on a free loopback port, scraping each job's /metrics every
# second, its storage in the test's directory; stopped with the harness
sub start_prometheus {
    my ($class, $t, %o) = @_;
    my $bin = which_bin('prometheus') or return undef;
    my $dir = "$t->{dir}/prometheus";
    make_path("$dir/data");
    my $port = $t->free_port;
    my $conf = "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
             . "scrape_configs:\n";
    for my $job (sort keys %{ $o{jobs} }) {
        $conf .= "  - job_name: $job\n    scrape_interval: 1s\n"
               . "    static_configs:\n      - targets: ['$o{jobs}{$job}']\n";
    }
    open my $fh, '>', "$dir/prometheus.yml" or die $!;
    print $fh $conf;
    close $fh;
    my $pid = $t->spawn('prometheus', "$dir/prometheus.log", $bin,
                        "--config.file=$dir/prometheus.yml",
                        "--storage.tsdb.path=$dir/data",
                        "--web.listen-address=127.0.0.1:$port",
                        '--log.level=warn');
    my $self = bless { t => $t, port => $port, pid => $pid, dir => $dir }, $class;
    wait_until(30, sub {
        my $r = eval { $t->http(port => $port, method => 'GET',
                                path => '/-/ready', timeout => 2) };
        return $r && $r->{status} == 200;
    }, 0.3) or die "prometheus did not start:\n"
                   . $t->read_file("$dir/prometheus.log");
    return $self;
}

# query($expr): the instant vector as [{ metric => {...}, value => N }]
sub query {
    my ($self, $expr) = @_;
    (my $q = $expr) =~ s/([^A-Za-z0-9\-_.~])/sprintf('%%%02X', ord($1))/ge;
    my $r = $self->{t}->http(port => $self->{port}, method => 'GET',
                             path => "/api/v1/query?query=$q", timeout => 10);
    my $j = json_decode($r->{body}) // {};
    return [] unless ($j->{status} // '') eq 'success';
    return [ map { { metric => $_->{metric}, value => $_->{value}[1] + 0 } }
             @{ $j->{data}{result} } ];
}

# the sum of an expression's values (0 when empty)
sub sum {
    my ($self, $expr) = @_;
    my $s = 0;
    $s += $_->{value} for @{ $self->query($expr) };
    return $s;
}

# the scrape targets' health: { job => "up"|"down"|... }
sub targets {
    my ($self) = @_;
    my $r = $self->{t}->http(port => $self->{port}, method => 'GET',
                             path => '/api/v1/targets', timeout => 10);
    my $j = json_decode($r->{body}) // {};
    return { map { $_->{labels}{job} => $_->{health} }
             @{ $j->{data}{activeTargets} || [] } };
}

sub stop {
    my ($self) = @_;
    $self->{t}->stop_pid(delete $self->{pid}, 'TERM', 10) if $self->{pid};
}

1;
