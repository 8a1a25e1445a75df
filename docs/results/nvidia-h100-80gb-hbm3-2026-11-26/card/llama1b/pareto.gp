if (!exists('output_file')) output_file = ('pareto.png')
set terminal pngcairo size 640,420 font ',9'
set output output_file
set multiplot layout 1,1 title 'Peak memory against step time (lower left is better)'
set key outside bottom center horizontal
set grid
set xrange [0:*]
set yrange [0:*]
set offsets 0, graph 0.08, graph 0.12, 0
set xlabel 'step time, ms (median)'
set ylabel 'peak above baseline, MiB'
set title (('llama:size=tiny:depth=16:hidden=2048:heads=32:kv_heads=8:') . "\n" . ('mlp=8192:seq=2048:batch=1:vocab=32000')) noenhanced
plot 'pareto.dat' index 0 using 1:2 with points pt 7 ps 1.4 title 'strategy', '' index 0 using 1:2:3 with labels offset 0,0.9 font ',8' noenhanced notitle, '' index 1 using 1:2 with linespoints lw 2 dt 2 pt 6 ps 2.2 title 'Pareto front'
unset multiplot
