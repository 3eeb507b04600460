# Toy app: buttons at fixed places; a click writes the button's label to answer.txt.
# usage: wish buttons.tcl TITLE WIDTH HEIGHT LABEL X Y [LABEL X Y ...]
# A button whose label is a Tk colour name ("red") is painted in that colour and made larger:
# on a policy's small screenshot the colour is what can be seen, the text is a few pixels.
lassign $argv title w h
wm title . $title
wm geometry . ${w}x${h}+0+0
wm resizable . 0 0
proc answer {text} {
    set f [open /workspace/answer.txt w]
    puts -nonewline $f $text
    close $f
}
set i 0
foreach {label x y} [lrange $argv 3 end] {
    button .b$i -text $label -command [list answer $label]
    if {![catch {winfo rgb . $label}]} {
        .b$i configure -background $label -activebackground $label -width 6 -height 2
    }
    place .b$i -x $x -y $y -anchor center
    incr i
}
