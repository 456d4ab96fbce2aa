package ocistate

import (
	"encoding/json"
	"errors"
	"fmt"
)

// errNotObject is returned where a JSON object was expected.
var errNotObject = errors.New("not a JSON object")

// object walks the JSON object at dec's position, calling field for each
// key; field must consume the key's value (decode or skip it). Nothing is
// held beyond the token being read, so memory follows the longest single
// string, not the input.
func object(dec *json.Decoder, field func(key string) error) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if t != json.Delim('{') {
		return errNotObject
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := t.(string)
		if !ok {
			return fmt.Errorf("object key %v: %w", t, errNotObject)
		}
		if err := field(key); err != nil {
			return err
		}
	}
	_, err = dec.Token() // the closing '}'
	return err
}

// skip consumes one value. Decoded as raw bytes, it is scanned at the
// decoder's full speed: walked token by token, each string and number
// became a Go value, and CRI-O's config.json (its seccomp profile lists
// every syscall by name) took the hook about 0.9 ms of its 2.6 ms. The
// value is held once more while it is copied; in the state, the values
// skipped are annotations and short fields, each under maxStateBytes.
func skip(dec *json.Decoder) error {
	var raw json.RawMessage
	return dec.Decode(&raw)
}

// annotations keeps, of the object at dec's position, only the keys the
// hook reads; every other annotation (a pod may carry 256 KiB of them) is
// skipped as it streams by.
func annotations(dec *json.Decoder, into map[string]string) error {
	return object(dec, func(key string) error {
		if !wanted[key] {
			return skip(dec)
		}
		var v string
		if err := dec.Decode(&v); err != nil {
			return err
		}
		into[key] = v
		return nil
	})
}

// wanted are the annotation keys the hook reads.
var wanted = func() map[string]bool {
	m := map[string]bool{keyPodNamespace: true, keyPodName: true, keyPodUID: true, keyContainerName: true,
		keySandboxID: true, keyContainerdSB: true, keyContainerdNamespace: true, keyContainerdPod: true, keyContainerdUID: true,
		keyContainerdName: true}
	for _, k := range imageKeys {
		m[k] = true
	}
	return m
}()
