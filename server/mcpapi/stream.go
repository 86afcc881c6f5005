package mcpapi

// A session's standalone GET stream, taken out of net/http once it is accepted. An idle session
// is mostly that stream, and net/http holds a lot for one: two goroutines (the handler, its 8 KiB
// stack parked in the SDK's hangResponse, and the connection's background read), a 4 KiB read
// buffer, a 4 KiB write buffer, the response's 2 KiB chunk buffer, and the request (about 48 KiB
// a session in all; 31 KiB now, docs/benchmarks.md). So an HTTP/1.1 stream is hijacked: the handler
// writes the response head and returns, net/http lets go of all of that, and the stream is the
// connection plus one goroutine that reads it to notice the client leaving. Every message the
// SDK would put on the standalone stream (the doorbell, progress during a waiting claim) is
// written here instead (streamConn.Write), one chunk per event, as the SDK writes them.
// HTTP/2 and HTTP/1.0 connections and resumption requests (Last-Event-ID) keep the SDK's
// stream. The request log records a hijacked stream when it opens, not when it ends.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"switchboard/server/httpx"
	"switchboard/server/store"
)

const streamWriteTimeout = 5 * time.Second // one event; a client that does not read is cut off

var errStreamClosed = errors.New("GET stream closed")

// eventStream is a hijacked GET stream.
type eventStream struct {
	conn net.Conn
	once sync.Once
	done chan struct{} // closed when the stream ends

	mu  sync.Mutex // one event at a time
	buf bytes.Buffer
}

// send writes one message as an SSE event in one HTTP chunk.
func (es *eventStream) send(data []byte) error {
	es.mu.Lock()
	defer es.mu.Unlock()
	select {
	case <-es.done:
		return errStreamClosed
	default:
	}
	es.buf.Reset()
	chunk(&es.buf, "event: message\ndata: ", data, "\n\n")
	_ = es.conn.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if _, err := es.conn.Write(es.buf.Bytes()); err != nil {
		es.close()
		return err
	}
	if es.buf.Cap() > 64<<10 {
		es.buf = bytes.Buffer{} // a large event's buffer is not kept for an idle stream
	}
	return nil
}

// chunk appends one HTTP/1.1 chunk holding head, data and tail.
func chunk(b *bytes.Buffer, head string, data []byte, tail string) {
	fmt.Fprintf(b, "%x\r\n", len(head)+len(data)+len(tail))
	b.WriteString(head)
	b.Write(data)
	b.WriteString(tail)
	b.WriteString("\r\n")
}

// close ends the stream with the last chunk and closes the connection (once).
func (es *eventStream) close() {
	es.once.Do(func() {
		close(es.done)
		_ = es.conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = es.conn.Write([]byte("0\r\n\r\n"))
		_ = es.conn.Close()
	})
}

// serveStream serves an accepted GET stream of s over the hijacked connection. It reports false
// when the connection cannot be hijacked; the caller then lets the SDK serve the stream. The
// stream ends at expires, when its credential (an OAuth access token) expires; zero: never.
func (h *Handler) serveStream(w http.ResponseWriter, r *http.Request, s *session, expires time.Time) bool {
	if r.ProtoMajor != 1 || r.ProtoMinor < 1 || len(r.Header.Values("Last-Event-ID")) > 0 {
		return false // chunked encoding needs HTTP/1.1; HTTP/2 cannot be hijacked
	}
	h.mu.Lock()
	busy := s.streams > 0
	if !busy {
		s.streams++ // reserved: a second GET meanwhile gets the conflict
	}
	h.mu.Unlock()
	if busy {
		writeError(w, http.StatusConflict, store.CodeConflict, "the session already has a GET stream")
		return true
	}
	unreserve := func() {
		h.mu.Lock()
		s.streams--
		h.mu.Unlock()
	}

	head := w.Header().Clone() // the security headers, set before the handler ran
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		unreserve()
		return false
	}
	if sw, ok := w.(*httpx.StatusWriter); ok {
		sw.Status = http.StatusOK // for the request log: the head is written below, not through w
	}
	head.Set("Content-Type", "text/event-stream")
	head.Set("Transfer-Encoding", "chunked")
	head.Set(sessionHeader, s.id)
	head.Set("Connection", "close") // the connection ends with the stream: net/http has let go of it
	head.Del("Content-Length")
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 200 OK\r\n")
	_ = head.Write(&b)
	b.WriteString("\r\n")
	// An SSE comment, as the SDK sends, so that proxies forward the head at once.
	chunk(&b, ": ok\n\n", nil, "")
	_ = conn.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if _, err := conn.Write(b.Bytes()); err != nil {
		unreserve()
		_ = conn.Close()
		return true
	}
	es := &eventStream{conn: conn, done: make(chan struct{})}
	s.stream.Store(es)
	h.mu.Lock()
	gone := h.sessions[s.id] != s // closed meanwhile: dropSession did not see the stream
	h.mu.Unlock()
	if gone {
		es.close()
	}
	if s.bell != nil {
		s.bell.StreamOpened()
	}
	stop := func() bool { return false }
	if !expires.IsZero() {
		stop = time.AfterFunc(time.Until(expires), es.close).Stop
	}
	es.watch(rw, func() {
		stop()
		s.stream.CompareAndSwap(es, nil)
		h.streamClosed(s)
	})
	return true
}

// watch starts the one goroutine of a hijacked stream: it reads the connection only to notice
// the client leaving, then ends the stream and calls end. Nothing more is read from a stream's
// connection but its end; bytes a client sends anyway (a pipelined request it should not
// send) are dropped.
func (es *eventStream) watch(rw *bufio.ReadWriter, end func()) {
	var in io.Reader = es.conn
	if rw.Reader.Buffered() > 0 {
		in = rw.Reader
	}
	go func() {
		var one [1]byte
		for {
			if _, err := in.Read(one[:]); err != nil {
				break
			}
		}
		es.close()
		end()
	}()
}

// streamConn routes what the SDK would write to the standalone stream (every message that is
// not a response: the JSON responses carry only those) to the session's hijacked stream, when
// it has one.
type streamConn struct {
	mcp.Connection
	stream *atomic.Pointer[eventStream]
}

func (c *streamConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if _, resp := msg.(*jsonrpc.Response); !resp {
		if es := c.stream.Load(); es != nil {
			data, err := jsonrpc.EncodeMessage(msg)
			if err != nil {
				return err
			}
			return es.send(data)
		}
	}
	return c.Connection.Write(ctx, msg)
}

// listenStream is a 2026-07-28 subscriptions/listen stream, which costs what a GET stream
// costs: the SDK answers the request and writes the ack through net/http (so a refusal keeps
// its status), and right after the ack an HTTP/1.1 connection is hijacked, net/http's handler
// returns, and every later message is a chunk on the connection. What is left of an idle
// listen stream is the SDK's listen handler, parked until the session closes, and the
// connection's one reading goroutine; a claude/channel listen keeps no handler (holdResult).
// HTTP/2 and HTTP/1.0 keep the SDK's stream.
type listenStream struct {
	w          http.ResponseWriter // until the ack (acked)
	cred       []byte              // the credential hash it was opened with (closeUnresolvedListens)
	hijackable bool
	release    context.CancelFunc // ends the SDK's wait on the request, so that net/http's handler returns
	opened     func()             // the stream may be rung (the ack is out)
	closed     context.Context    // done when the server shuts down
	end        func()             // ends the listen: its session, bell and cap slot (once)

	mu     sync.Mutex   // writes until the hand-over, and the hand-over itself
	es     *eventStream // set once hijacked; then every message goes there
	served bool         // net/http's handler returned without a hijack: the SDK's stream ended
	held   bool         // the listen's answer is not written: the stream outlives the SDK's handler
	cut    bool         // closed by this side (close): a stream hijacked later closes at once
}

// close ends the listen from the server's side (its endpoint was revoked): a hijacked stream's
// connection gets its last chunk and closes, and the SDK's stream ends with its session (end).
func (l *listenStream) close() {
	l.mu.Lock()
	l.cut = true
	es := l.es
	l.mu.Unlock()
	if es != nil {
		es.close()
	}
	l.end()
}

// holdResult reports whether the listen is hijacked, and if so drops its answer, so that the
// SDK's handler may return at once rather than park a goroutine for the stream's life (a
// claude/channel listen asks the SDK for nothing, so its handler has nothing left to do).
func (l *listenStream) holdResult() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = l.es != nil
	return l.held
}

// listenWriter marks the head of a listen stream that is to be hijacked Connection: close:
// the connection ends with the stream, so a client must not reuse it.
type listenWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *listenWriter) WriteHeader(code int) {
	if !w.wrote && code == http.StatusOK {
		w.Header().Set("Connection", "close")
	}
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *listenWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

func (w *listenWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// acked runs once the ack is written through net/http. l.mu must be held.
func (l *listenStream) acked() {
	if l.served || l.es != nil {
		return
	}
	if l.hijackable {
		// The response head and the ack are written (the SDK flushes each event), so Hijack
		// flushes what is left and the connection stands between two chunks.
		if conn, rw, err := http.NewResponseController(l.w).Hijack(); err == nil {
			l.es = &eventStream{conn: conn, done: make(chan struct{})}
			stop := context.AfterFunc(l.closed, l.es.close)
			l.es.watch(rw, func() {
				stop()
				l.end()
			})
			l.release()
			if l.cut {
				l.es.close() // closed while the ack was written: the watcher ends the rest
			}
		}
	}
	// The listen lives as long as its stream and w is not used again: kept, it would keep
	// net/http's response, the request, and the connection's 4 KiB read and write buffers
	// (Hijack hands those over; nothing here uses them), 10 KiB a stream in all.
	l.w = nil
	l.opened()
}

// handlerDone is called when net/http's handler returns; it reports whether the stream lives
// on hijacked (its watcher then ends it).
func (l *listenStream) handlerDone() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.served = true
	return l.es != nil
}

// listenConn routes what the SDK writes on a listen stream's connection: through net/http
// up to the ack, then on the hijacked stream, where the listen's response (the SDK answers
// once the session closes) is the last message.
type listenConn struct {
	mcp.Connection
	l *listenStream
}

func (c *listenConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	c.l.mu.Lock()
	es := c.l.es
	if es == nil {
		defer c.l.mu.Unlock()
		err := c.Connection.Write(ctx, msg)
		if req, ok := msg.(*jsonrpc.Request); ok && err == nil && req.Method == ackMethod {
			c.l.acked()
		}
		return err
	}
	_, resp := msg.(*jsonrpc.Response)
	held := resp && c.l.held
	c.l.mu.Unlock()
	if held {
		return nil // the stream stays open until the client leaves or the server shuts down
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	err = es.send(data)
	if resp {
		es.close()
	}
	return err
}
