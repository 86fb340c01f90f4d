package main

import "image/color"

// Curve colours of loss.png.
var (
	plotColorTrain = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	plotColorVal   = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
)
