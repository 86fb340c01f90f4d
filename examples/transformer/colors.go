package main

import "image/color"

var plotColorVal = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
