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
set title (('gpt2:size=large:depth=36:hidden=1280:heads=20:seq=1024:') . "\n" . ('batch=4:vocab=50257:context=1024:dropout=0.1')) noenhanced
plot 'pareto.dat' index 0 using 1:2 with points pt 7 ps 1.4 title 'strategy', '' index 0 using 1:2:3 with labels offset 0,0.9 font ',8' noenhanced notitle, '' index 1 using 1:2 with linespoints lw 2 dt 2 pt 6 ps 2.2 title 'Pareto front', '' index 2 using 1:2 with linespoints lw 2 pt 5 title ('optimal:offload=no:chunks_under_amp=no at each budget') noenhanced, '' index 3 using 1:2 with linespoints lw 2 pt 5 title ('optimal:offload=yes:chunks_under_amp=no at each budget') noenhanced
unset multiplot
