package events

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
)

func TestGlobal(t *testing.T) {
	for _, s := range []string{"127.0.0.1", "10.0.0.1", "169.254.169.254", "::1", "192.168.1.1", "172.16.5.4",
		"100.64.0.1", "fc00::1", "fe80::1", "::ffff:127.0.0.1", "0.0.0.0", "::"} {
		if Global(netip.MustParseAddr(s)) {
			t.Errorf("%s counted as globally routable", s)
		}
	}
	for _, s := range []string{"8.8.8.8", "1.1.1.1", "2606:4700::1111"} {
		if !Global(netip.MustParseAddr(s)) {
			t.Errorf("%s counted as not globally routable", s)
		}
	}
}

func TestCheckURL(t *testing.T) {
	c := NewClient(false)
	for _, u := range []string{"http://example.com/h", "https://127.0.0.1/h", "https://10.0.0.1/h", "https://169.254.169.254/h",
		"https://[::1]/h", "https://u:p@example.com/h", "https://example.com/h#x", "ftp://example.com", "/relative"} {
		var ue *URLError
		if err := c.CheckURL(u); !errors.As(err, &ue) {
			t.Errorf("%s: %v, want a URLError", u, err)
		}
	}
	if err := c.CheckURL("https://example.com/hook?k=1"); err != nil {
		t.Errorf("public https: %v", err)
	}
	if err := NewClient(true).CheckURL("http://127.0.0.1:8080/h"); err != nil {
		t.Errorf("private setting: %v", err)
	}
}

// A name that resolves to loopback is refused on the connection itself: no request arrives.
func TestDialRefusesPrivate(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	url := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	status, cat, _ := NewClient(false).Post(context.Background(), url, "sub_x", "evt", []string{"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 24))}, []byte("{}"))
	if status != 0 || cat != ConnectionRefused || hits.Load() != 0 {
		t.Fatalf("status %d cat %q hits %d: want refused before any request", status, cat, hits.Load())
	}
	// A redirect is not followed.
	redir := httptest.NewServer(http.RedirectHandler(srv.URL, http.StatusFound))
	defer redir.Close()
	status, cat, _ = NewClient(true).Post(context.Background(), redir.URL, "sub_x", "evt", nil, []byte("{}"))
	if status != http.StatusFound || cat != HTTP4xx || hits.Load() != 0 {
		t.Fatalf("redirect: status %d cat %q hits %d", status, cat, hits.Load())
	}
}

func TestSignStandardWebhooks(t *testing.T) {
	key := []byte("0123456789abcdef01234567")
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	m := hmac.New(sha256.New, key)
	m.Write([]byte("evt_1.1700000000.{\"a\":1}"))
	want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	if got := Sign([]string{secret}, "evt_1", 1700000000, []byte(`{"a":1}`)); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	if got := Sign([]string{secret, secret}, "evt_1", 1700000000, []byte(`{"a":1}`)); got != want+" "+want {
		t.Fatalf("two secrets: %s", got)
	}
}
