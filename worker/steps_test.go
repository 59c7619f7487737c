package worker

import (
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/checkout-saga/checkout-saga/activities"
)

// Every activity is registered, once, under its method's name: the name the SDK gave the
// method values the saga called before it called steps by name, which every recorded
// history holds. A step named otherwise would leave those histories unable to replay.
func TestStepsRegisterEveryActivityUnderItsMethodName(t *testing.T) {
	acts := &activities.Activities{}
	var registered []string
	for _, s := range Steps(acts) {
		method := runtime.FuncForPC(reflect.ValueOf(s.Activity).Pointer()).Name()
		method = strings.TrimSuffix(method[strings.LastIndex(method, ".")+1:], "-fm")
		if s.Name != method {
			t.Errorf("step %q runs the method %s: a step's name is its method's name", s.Name, method)
		}
		if slices.Contains(registered, s.Name) {
			t.Errorf("step %q is registered twice", s.Name)
		}
		registered = append(registered, s.Name)
	}
	typ := reflect.TypeOf(acts)
	for i := range typ.NumMethod() {
		if name := typ.Method(i).Name; !slices.Contains(registered, name) {
			t.Errorf("the activity %s has no step: add it to Steps (and its name to package steps)", name)
		}
	}
}
