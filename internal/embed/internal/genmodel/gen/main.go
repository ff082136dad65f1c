// Command gen writes the tiny BERT-shaped test model (genmodel.Tiny) (model.onnx, tokenizer.json) into the
// directory named by its argument: go run ./internal/genmodel/gen testdata/tiny-bert
package main

import (
	"fmt"
	"os"

	"github.com/strata-mem/strata/internal/embed/internal/genmodel"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen DIR")
		os.Exit(2)
	}
	if err := genmodel.Tiny.Write(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
