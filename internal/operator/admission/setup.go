package admission

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	casv1beta1 "github.com/cloister-cc/cloister/api/cas/v1beta1"
)

// The paths the webhook server serves. The operator chart's webhook
// configurations name the same paths (charts' test keeps them in step).
const (
	PathValidateSignedPolicy    = "/validate-signedpolicy"
	PathValidateEncryptedPolicy = "/validate-encryptedpolicy"
	PathValidateCEXPlugin       = "/validate-cexplugin"
	PathValidateSGXPlugin       = "/validate-sgxplugin"
	PathValidateLAS             = "/validate-las"
	PathDefaultCEXPlugin        = "/default-cexplugin"
	PathDefaultSGXPlugin        = "/default-sgxplugin"
	PathDefaultLAS              = "/default-las"
	PathInjectPod               = "/inject-pod"
)

// Paths lists every path Setup serves.
var Paths = []string{
	PathValidateSignedPolicy, PathValidateEncryptedPolicy, PathValidateCEXPlugin, PathValidateSGXPlugin,
	PathValidateLAS, PathDefaultCEXPlugin, PathDefaultSGXPlugin, PathDefaultLAS, PathInjectPod,
}

// Setup registers every webhook on mgr's webhook server.
func Setup(mgr ctrl.Manager, operatorNamespace string) error {
	group := func(g, k string) schema.GroupKind { return schema.GroupKind{Group: g, Kind: k} }
	base := basev1beta1.GroupVersion.Group
	cas := casv1beta1.GroupVersion.Group
	steps := []error{
		ctrl.NewWebhookManagedBy(mgr, &casv1beta1.SignedPolicy{}).
			WithValidator(validator[*casv1beta1.SignedPolicy]{group(cas, "SignedPolicy"), func(p *casv1beta1.SignedPolicy) (field.ErrorList, []string) {
				return SignedPolicy(p), nil
			}}).WithValidatorCustomPath(PathValidateSignedPolicy).Complete(),
		ctrl.NewWebhookManagedBy(mgr, &casv1beta1.EncryptedPolicy{}).
			WithValidator(validator[*casv1beta1.EncryptedPolicy]{group(cas, "EncryptedPolicy"), func(p *casv1beta1.EncryptedPolicy) (field.ErrorList, []string) {
				return EncryptedPolicy(p), nil
			}}).WithValidatorCustomPath(PathValidateEncryptedPolicy).Complete(),
		ctrl.NewWebhookManagedBy(mgr, &basev1beta1.CEXPlugin{}).
			WithValidator(validator[*basev1beta1.CEXPlugin]{group(base, "CEXPlugin"), func(p *basev1beta1.CEXPlugin) (field.ErrorList, []string) {
				return CEXPlugin(p), ImageWarnings(&p.Spec.ServiceSpec)
			}}).WithValidatorCustomPath(PathValidateCEXPlugin).
			WithDefaulter(defaulter[*basev1beta1.CEXPlugin](func(p *basev1beta1.CEXPlugin) {
				DefaultNamespace(&p.Spec.Namespace, operatorNamespace)
			})).WithDefaulterCustomPath(PathDefaultCEXPlugin).Complete(),
		ctrl.NewWebhookManagedBy(mgr, &basev1beta1.SGXPlugin{}).
			WithValidator(validator[*basev1beta1.SGXPlugin]{group(base, "SGXPlugin"), func(p *basev1beta1.SGXPlugin) (field.ErrorList, []string) {
				return nil, ImageWarnings(&p.Spec.ServiceSpec)
			}}).WithValidatorCustomPath(PathValidateSGXPlugin).
			WithDefaulter(defaulter[*basev1beta1.SGXPlugin](func(p *basev1beta1.SGXPlugin) {
				DefaultNamespace(&p.Spec.Namespace, operatorNamespace)
			})).WithDefaulterCustomPath(PathDefaultSGXPlugin).Complete(),
		ctrl.NewWebhookManagedBy(mgr, &basev1beta1.LAS{}).
			WithValidator(validator[*basev1beta1.LAS]{group(base, "LAS"), func(p *basev1beta1.LAS) (field.ErrorList, []string) {
				return nil, ImageWarnings(&p.Spec.ServiceSpec)
			}}).WithValidatorCustomPath(PathValidateLAS).
			WithDefaulter(defaulter[*basev1beta1.LAS](func(p *basev1beta1.LAS) {
				DefaultNamespace(&p.Spec.Namespace, operatorNamespace)
			})).WithDefaulterCustomPath(PathDefaultLAS).Complete(),
		ctrl.NewWebhookManagedBy(mgr, &corev1.Pod{}).
			WithDefaulter(podInjector{}).WithDefaulterCustomPath(PathInjectPod).Complete(),
	}
	for _, err := range steps {
		if err != nil {
			return err
		}
	}
	return nil
}

// validator adapts a pure check to controller-runtime: create and update
// are checked alike (an update must leave a valid object), delete is free.
type validator[T client.Object] struct {
	kind  schema.GroupKind
	check func(T) (field.ErrorList, []string)
}

func (v validator[T]) ValidateCreate(_ context.Context, obj T) (admission.Warnings, error) {
	errs, warnings := v.check(obj)
	if len(errs) > 0 {
		return warnings, apierrors.NewInvalid(v.kind, obj.GetName(), errs)
	}
	return warnings, nil
}

func (v validator[T]) ValidateUpdate(ctx context.Context, _, obj T) (admission.Warnings, error) {
	return v.ValidateCreate(ctx, obj)
}

func (v validator[T]) ValidateDelete(context.Context, T) (admission.Warnings, error) { return nil, nil }

type defaulter[T client.Object] func(T)

func (d defaulter[T]) Default(_ context.Context, obj T) error {
	d(obj)
	return nil
}

type podInjector struct{}

func (podInjector) Default(_ context.Context, pod *corev1.Pod) error { return Inject(pod) }
