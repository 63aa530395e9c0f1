#!/usr/bin/perl
# The dashboard's files (ngx_sandbox_mcp_module/ui/) as they are embedded
# (the pages laid out on ui/layouts/):
# no inline script or style (the pages run under script-src 'self' and
# style-src 'self'), nothing loaded from outside the origin (no absolute or
# protocol-relative address, no @import, no web font), and no script API
# that turns text into markup or code (innerHTML, document.write, eval,
# ...): data only ever becomes text.  Every page has its landmarks, one h1,
# a language and a viewport for phones.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(repo_root slurp);
use SMCP::UI;

my $ui = repo_root() . '/ngx_sandbox_mcp_module/ui';
my $pages = SMCP::UI->new(undef);
my @html = $pages->pages;
my @js = sort glob("$ui/static/*.js");
my @css = sort glob("$ui/static/*.css");

ok(@html >= 3 && @js >= 3 && @css >= 1, 'the pages, scripts and styles are there')
    or SMCP::Test::give_up("no dashboard files under $ui");

# an address that leaves the origin: scheme:, //host
my $external = qr{^\s*(?:[a-z][a-z0-9+.-]*:(?!,)|//|\\\\)}i;

for my $name (@html) {
    my $h = $pages->file($name);
    ok(defined $h, "$name: laid out (build/smcp-embed page)") or next;

    my @scripts = $h =~ /<script\b([^>]*)>(.*?)<\/script>/gis;
    my $inline = 0;
    for (my $i = 0; $i < @scripts; $i += 2) {
        $inline++ if $scripts[$i] !~ /\bsrc=/i || $scripts[$i + 1] =~ /\S/;
    }
    is($inline, 0, "$name: no inline script");
    unlike($h, qr/<style\b/i, "$name: no <style> element");
    unlike($h, qr/\sstyle\s*=/i, "$name: no style attribute");
    unlike($h, qr/\son[a-z]+\s*=/i, "$name: no event handler attribute");
    unlike($h, qr/javascript:/i, "$name: no javascript: address");

    my @urls = $h =~ /\b(?:src|href|action|srcset|poster|data)\s*=\s*"([^"]*)"/gi;
    my @out = grep { /$external/ && !/^data:,$/ } @urls;
    is_deeply(\@out, [], "$name: every address is on the origin");
    unlike($h, qr/<base\b/i, "$name: no <base>");

    like($h, qr/<html lang="[a-z]{2}"/, "$name: a language");
    like($h, qr/<meta name="viewport" content="width=device-width, initial-scale=1">/,
         "$name: a viewport for phones");
    like($h, qr/<meta name="color-scheme" content="light dark">/, "$name: light and dark");
    is(scalar(() = $h =~ /<main\b/gi), 1, "$name: one <main>");
    is(scalar(() = $h =~ /<h1\b/gi), 1, "$name: one <h1>");
    like($h, qr/<header\b/i, "$name: a <header> (banner)");
}

for my $f (@js) {
    my $name = $f =~ s{.*/}{}r;
    my $s = slurp($f);
    like($s, qr/^(?:\/\*.*?\*\/\s*)?"use strict";/s, "$name: strict mode");
    for my $bad ('innerHTML', 'outerHTML', 'insertAdjacentHTML', 'document.write',
                 'eval(', 'new Function', 'DOMParser', 'createContextualFragment',
                 'srcdoc', 'import(') {
        ok(index($s, $bad) < 0, "$name: no $bad");
    }
    unlike($s, qr/set(?:Timeout|Interval)\s*\(\s*["'`]/, "$name: no timer from a string");
    unlike($s, qr/["'`](?:https?:)?\/\/[a-z0-9]/i, "$name: no address off the origin");
}

for my $f (@css) {
    my $name = $f =~ s{.*/}{}r;
    my $c = slurp($f);
    unlike($c, qr/\@import\b/i, "$name: no \@import");
    unlike($c, qr/\@font-face\b/i, "$name: no web font");
    my @urls = $c =~ /url\(\s*["']?([^"')]*)/gi;
    is_deeply([ grep { /$external/ } @urls ], [], "$name: no url() off the origin");
    like($c, qr/prefers-color-scheme:\s*dark/, "$name: a dark scheme");
    like($c, qr/:focus-visible/, "$name: focus styles");
}

done_testing;
