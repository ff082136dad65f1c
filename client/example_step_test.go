package client_test

import (
	"context"
	"fmt"
	"os"

	"github.com/strata-mem/strata/client"
)

type Cut struct {
	Output string `json:"output"`
}

// render stands for a side effect that is idempotent on key (here: a fixed output name).
func render(_ context.Context, out, key string) (Cut, error) {
	return Cut{Output: out}, os.WriteFile(out, []byte(key), 0o644)
}

// A step whose side effect is done once, even across crashes and restarts (docs/jobs.md).
func ExampleRunStep() {
	ctx := context.Background()
	c := client.New("http://localhost:8080", os.Getenv("STRATA_API_KEY"), client.WithOwner("media-agent"))
	job := "promo-42"
	cut, err := client.RunStep(ctx, c, job, "cut", func(ctx context.Context) (Cut, error) {
		return client.Once(ctx, c, job, "video.cut", map[string]any{"from": 0, "to": 12},
			func(ctx context.Context, key string) (Cut, error) {
				return render(ctx, "out/cut.mp4", key)
			})
	}, client.StepInputOf(client.StepInput{Tool: "ffmpeg"}))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cut.Output)
}
