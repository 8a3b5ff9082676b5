package httpapi

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/suanli/suanli/node/api"
)

// FuzzDecodeBody: any body is an OrderRequest or a bad request, never a
// panic, and a refused body's message says what is wrong.
func FuzzDecodeBody(f *testing.F) {
	f.Add(`{"side":"bid","market":"nvidia-h100-sxm5-80gb","count":1,"price":"1.00"}`)
	f.Add(`{"count":"three"}`)
	f.Add(`{"colour":1}`)
	f.Add(`{"side":"bid"`)
	f.Add(``)
	f.Add(`[]`)
	f.Add(`{} {}`)
	f.Add(`{"regions":"CN"}`)
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest("POST", "/api/v0/orders", strings.NewReader(body))
		var req api.OrderRequest
		err := decodeBody(r, "order request", 64<<10, &req)
		if err != nil && (!errors.Is(err, api.ErrBadRequest) || !strings.HasPrefix(err.Error(), "order request: ")) {
			t.Errorf("decodeBody(%q) = %v, want a bad request about the order request", body, err)
		}
	})
}
